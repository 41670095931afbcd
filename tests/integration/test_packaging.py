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
project = "p"
logstore = "l"

[consumer]
group = "g"
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
            'logstore = "l"', 'logstore = "l"\naccess_key_id = "AK"\naccess_key_secret = "s3cr3t"'
        )
    )
    result = loghubd("check-config", str(path), env={"LOGHUBD_CONSUMER__GROUP": "x"})
    assert result.returncode == 0, result.stderr
    effective = json.loads(result.stdout)
    assert effective["consumer"]["group"] == "x"
    assert effective["source"]["access_key_secret"] == "***"
    assert "s3cr3t" not in result.stdout


def test_run_refuses_bad_config_with_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(BASE.format(extra="max_fetch_log_groups = 5000"))
    result = loghubd("run", "-c", str(path))
    assert result.returncode == 2
    assert "consumer.max_fetch_log_groups" in result.stderr
