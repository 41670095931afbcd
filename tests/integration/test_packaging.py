"""Packaging: the systemd unit verifies, the Dockerfile keeps its operational promises, and
`loghubd check-config` names bad keys. Real commands, no mocks."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def loghubd(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loghubd", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def test_systemd_unit_verifies(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing: scripts/test.sh installs Debian's systemd"
    unit = (ROOT / "config" / "loghubd.service").read_text()
    # verify checks that ExecStart's binary exists: point it at this checkout's loghubd.
    exe = Path(sys.executable).with_name("loghubd")
    local = tmp_path / "loghubd.service"
    local.write_text(unit.replace("/usr/local/bin/loghubd", str(exe)))
    result = subprocess.run([analyze, "verify", str(local)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "", result.stderr
    lines = {
        line.split("=", 1)[0]: line.split("=", 1)[1]
        for line in unit.splitlines()
        if "=" in line and not line.startswith("#")
    }
    assert lines["Type"] == "notify"
    assert "WatchdogSec" in lines
    assert lines["KillSignal"] == "SIGTERM"
    # The stop timeout must leave room for the default shutdown grace (20 s) and the flush.
    assert int(lines["TimeoutStopSec"]) > 20
    assert lines["NoNewPrivileges"] == "yes"
    assert lines["ProtectSystem"] == "strict"


def test_dockerfile_runs_unprivileged_with_healthcheck_and_exec_entrypoint() -> None:
    lines = [line.strip() for line in (ROOT / "Dockerfile").read_text().splitlines()]
    instructions = [line for line in lines if line and not line.startswith("#")]
    from_lines = [line for line in instructions if line.startswith("FROM ")]
    assert all("-slim" in line for line in from_lines), from_lines
    users = [line for line in instructions if line.startswith("USER ")]
    assert users and users[-1] not in ("USER root", "USER 0"), users
    # the last USER comes after every RUN: nothing runs as root at run time
    last_user = max(i for i, line in enumerate(instructions) if line.startswith("USER "))
    last_run = max(i for i, line in enumerate(instructions) if line.startswith("RUN "))
    assert last_user > last_run
    health = " ".join(line for line in lines if line.startswith(("HEALTHCHECK", "CMD")))
    assert "HEALTHCHECK" in health and "/healthz" in health
    entry = [line for line in instructions if line.startswith("ENTRYPOINT")]
    assert len(entry) == 1
    # Exec form (a JSON array): loghubd is PID 1 and receives SIGTERM itself.
    assert json.loads(entry[0].removeprefix("ENTRYPOINT").strip())[:2] == ["loghubd", "run"]


BASE = """
[source]
endpoint = "http://127.0.0.1:7100"
project = "proj"
logstore = "logs"

[consumer]
group = "grp"
{extra}

[processor.jsonl]
path = "/tmp/out"
"""


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ("grup = 'x'", "consumer.grup"),
        ("heartbeat_interval = 'fast'", "consumer.heartbeat_interval"),
        ("timeout = 1\nheartbeat_interval = 5", "consumer.timeout"),
        ("on_failure = 'explode'", "consumer.on_failure"),
    ],
)
def test_check_config_refuses_naming_the_key(tmp_path: Path, extra: str, named: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(BASE.format(extra=extra))
    result = loghubd("check-config", str(path))
    assert result.returncode == 2
    assert named in result.stderr
    assert result.stdout == ""


def test_check_config_refuses_bad_processor_options(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(BASE.format(extra="") + "colour = 'red'\n")
    result = loghubd("check-config", str(path))
    assert result.returncode == 2
    assert "processor.jsonl.colour" in result.stderr


def test_check_config_prints_effective_config_with_env_override_and_masked_secret(
    tmp_path: Path,
) -> None:
    path = tmp_path / "good.toml"
    path.write_text(
        BASE.format(extra="").replace(
            'logstore = "logs"',
            'logstore = "logs"\naccess_key_id = "AK"\naccess_key_secret = "s3cr3t"',
        )
    )
    result = loghubd("check-config", str(path), env={"LOGHUBD_CONSUMER__GROUP": "grp-x"})
    assert result.returncode == 0, result.stderr
    effective = json.loads(result.stdout)
    assert effective["consumer"]["group"] == "grp-x"
    assert effective["source"]["access_key_secret"] == "***"
    assert "s3cr3t" not in result.stdout


def test_check_config_hides_the_secrets_of_processor_tables(tmp_path: Path) -> None:
    """What an operator pastes into a ticket: no password, token or key from a processor's
    table, whatever the key is called, and the URLs still readable."""
    path = tmp_path / "sinks.toml"
    path.write_text(
        BASE.format(extra="").replace(
            "[processor.jsonl]", "[processor]\nname = 'http'\n[processor.jsonl]"
        )
        + """
[processor.http]
url = "https://logs.example.com/v1?access_token=t0k3n"
bearer_token = "b3ar3r"
[processor.http.headers]
Proxy-Authorization = "Basic c2VjcmV0"
"X-Api-Key" = "k3yk3y"
"X-Source" = "loghubd"
[processor.postgres]
dsn = "host=db user=app password=pgpw dbname=logs"
[processor.parquet]
path = "s3://AKIA:s3cr3t/+k3y@bucket/logs"
"""
    )
    result = loghubd("check-config", str(path))
    assert result.returncode == 0, result.stderr
    # (A user:password in the http url is masked too, as the parquet path's below; beside
    # bearer_token it would be refused: both set the Authorization header.)
    for secret in ("t0k3n", "b3ar3r", "c2VjcmV0", "k3yk3y", "pgpw", "s3cr3t"):
        assert secret not in result.stdout, secret
    shown = json.loads(result.stdout)["processor"]
    assert shown["http"]["url"] == "https://logs.example.com/v1?access_token=***"
    assert shown["http"]["headers"] == {
        "Proxy-Authorization": "***",
        "X-Api-Key": "***",
        "X-Source": "loghubd",
    }
    assert shown["postgres"]["dsn"] == "host=db user=app password=*** dbname=logs"
    assert shown["parquet"]["path"] == "s3://AKIA:***@bucket/logs"


def test_run_refuses_bad_config_with_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(BASE.format(extra="max_fetch_log_groups = 5000"))
    result = loghubd("run", "-c", str(path))
    assert result.returncode == 2
    assert "consumer.max_fetch_log_groups" in result.stderr


def _security(unit_dir: Path) -> dict[str, bool]:
    """`systemd-analyze security --offline` of the unit in `unit_dir` (with any drop-in
    directory beside it): setting name → whether the hardening is in force."""
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing: scripts/test.sh installs Debian's systemd"
    result = subprocess.run(
        [analyze, "security", "--offline=yes", "--json=short", str(unit_dir / "loghubd.service")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return {entry["name"]: entry["set"] for entry in json.loads(result.stdout)}


def _local_unit(directory: Path) -> Path:
    exe = Path(sys.executable).with_name("loghubd")
    unit = (ROOT / "config" / "loghubd.service").read_text()
    (directory / "loghubd.service").write_text(unit.replace("/usr/local/bin/loghubd", str(exe)))
    return directory


def test_systemd_unit_limits_restart_policy_and_documentation(tmp_path: Path) -> None:
    lines = dict(
        line.split("=", 1)
        for line in (ROOT / "config" / "loghubd.service").read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )
    # exit 2 is what `loghubd run` returns for a configuration it refuses
    # (test_run_refuses_bad_config_with_exit_2), 3 for a project, logstore or group that does
    # not exist (test_every_source_failing_to_start_exits_at_once): no restart loop on them
    assert lines["RestartPreventExitStatus"].split() == ["2", "3"]
    assert int(lines["LimitNOFILE"]) >= 65536
    assert lines["ProtectProc"] == "invisible"
    assert lines["NotifyAccess"] == "main"
    doc = lines["Documentation"]
    assert doc == "file:///usr/share/doc/loghubd/systemd.md"
    assert (ROOT / "docs" / "systemd.md").is_file()
    security = _security(_local_unit(tmp_path))
    assert security["MemoryDenyWriteExecute="] is True
    assert security["ProtectProc="] is True


def test_jvm_drop_in_lifts_memory_deny_write_execute_which_stops_a_jvm(tmp_path: Path) -> None:
    unit_dir = _local_unit(tmp_path)
    (unit_dir / "loghubd.service.d").mkdir()
    shutil.copy(ROOT / "config" / "loghubd.service.d" / "jvm.conf", unit_dir / "loghubd.service.d")
    analyze = shutil.which("systemd-analyze")
    assert analyze
    verify = subprocess.run(
        [analyze, "verify", str(unit_dir / "loghubd.service")], capture_output=True, text=True
    )
    assert verify.returncode == 0 and not verify.stderr.strip(), verify.stderr
    security = _security(unit_dir)
    assert security["MemoryDenyWriteExecute="] is False  # the drop-in is in force
    assert security["ProtectProc="] is True  # and nothing else was loosened
    assert security["NoNewPrivileges="] is True
    # Why: the kernel's MDWE (what MemoryDenyWriteExecute=yes sets up) stops a JVM at start.
    java = shutil.which("java")
    assert java, "java is missing (the Spark plugin needs a JDK 17)"
    code = (
        "import ctypes, os, sys\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN = 65, 1\n"
        "if libc.prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0, 0, 0) != 0:\n"
        "    sys.exit(f'prctl(PR_SET_MDWE) failed: errno {ctypes.get_errno()}')\n"
        "os.execv(sys.argv[1], [sys.argv[1], '-version'])\n"
    )
    under_mdwe = subprocess.run(
        [sys.executable, "-c", code, java], capture_output=True, text=True, timeout=60
    )
    assert "prctl(PR_SET_MDWE) failed" not in under_mdwe.stderr, under_mdwe.stderr
    assert under_mdwe.returncode != 0, under_mdwe.stderr
    plain = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    assert plain.returncode == 0, plain.stderr
