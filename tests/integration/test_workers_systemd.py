"""`loghubd run --workers 2` under a real sd_notify listener, as systemd with the unit's
`NotifyAccess=main` would hear it: only the supervisor's PID speaks (checked with the
kernel's SCM_CREDENTIALS), READY=1 comes once both workers are in the group, WATCHDOG=1
keeps coming, SIGHUP reloads each worker in place, a worker whose event loop stops (SIGSTOP)
is killed and restarted alone, and SIGTERM brings STOPPING=1 and a clean exit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from loghubd.protocol import errors as E
from loghubd.testing import PortReservation, ServerProcess, free_ports, wait_until
from tests.integration.daemon_harness import PROJECT, Admin
from tests.integration.sd_notify import Listener

pytestmark = pytest.mark.slow


def children(parent: int) -> dict[str, int]:
    """name → pid of the supervisor's workers, from their command lines."""
    out = {}
    pids = subprocess.run(["pgrep", "-P", str(parent)], capture_output=True, text=True).stdout
    for pid in pids.split():
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:  # already gone
            continue
        if b"--name" in argv:
            out[argv[argv.index(b"--name") + 1].decode()] = int(pid)
    return out


def test_supervisor_reports_ready_when_every_worker_is_and_pets_the_watchdog(
    tmp_path: Path, loghubd_server: ServerProcess
) -> None:
    admin = Admin(loghubd_server.endpoint)
    admin.create_logstore("notified", 2)
    config = tmp_path / "loghubd.toml"
    ports = PortReservation(2)  # worker i listens on port + i; held for the whole test
    config.write_text(f"""
[source]
endpoint = "{loghubd_server.endpoint}"
project = "{PROJECT}"
logstore = "notified"
[consumer]
group = "sd"
name = "sdw"
heartbeat_interval = 1.0
timeout = 4.0
[processor.jsonl]
path = "{tmp_path / "out"}"
[ops]
listen = "127.0.0.1:{ports.port}"
[log]
format = "json"
""")
    listener = Listener(tmp_path / "notify.sock")
    log_path = tmp_path / "workers.log"
    env = {
        "NOTIFY_SOCKET": str(tmp_path / "notify.sock"),
        "WATCHDOG_USEC": "2000000",  # WatchdogSec=2: pings every 1 s, a worker stuck after 2 s
        "PATH": "/usr/bin:/bin",
    }
    with open(log_path, "wb") as log:
        parent = subprocess.Popen(
            [sys.executable, "-m", "loghubd", "run", "-c", str(config), "--workers", "2"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:

        def consumers() -> list[str]:
            try:
                return sorted(admin.group_status("notified", "sd")["consumers"])
            except E.ConsumerGroupNotExist:
                return []

        listener.receive_until("READY=1")
        # READY=1 only once both workers joined (each said READY=1 to the supervisor after
        # its first heartbeat went through).
        assert consumers() == ["sdw-0", "sdw-1"], log_path.read_text()[-3000:]
        assert "STATUS=2/2 workers ready" in listener.messages()
        assert listener.messages().count("READY=1") == 1
        listener.receive_until("WATCHDOG=1", 2, timeout=10)

        # SIGHUP: each worker reloads the file in place (same PIDs, each RELOADING=1 to the
        # supervisor, which does not take the pause in its pings for a stuck worker).
        before = children(parent.pid)
        parent.send_signal(signal.SIGHUP)

        def said(event: str) -> int:
            return log_path.read_text().count(f'"event": "{event}"')

        wait_until(lambda: said("ops_listening") == 4, 60, lambda: log_path.read_text()[-3000:])
        listener.receive_until("WATCHDOG=1", listener.messages().count("WATCHDOG=1") + 2)
        assert said("reloading") == 2 and said("worker_watchdog_timeout") == 0
        assert children(parent.pid) == before and parent.poll() is None
        wait_until(lambda: consumers() == ["sdw-0", "sdw-1"], 30)

        # A worker whose event loop stops: the supervisor kills and restarts it alone.
        assert sorted(before) == ["sdw-0", "sdw-1"]
        os.kill(before["sdw-0"], signal.SIGSTOP)
        wait_until(
            lambda: children(parent.pid).get("sdw-0") not in (None, before["sdw-0"]),
            20,
            lambda: log_path.read_text()[-3000:],
        )
        assert children(parent.pid)["sdw-1"] == before["sdw-1"]
        assert "worker_watchdog_timeout" in log_path.read_text()
        pets = listener.messages().count("WATCHDOG=1")
        listener.receive_until("WATCHDOG=1", pets + 2, timeout=10)

        parent.send_signal(signal.SIGTERM)
        listener.receive_until("STOPPING=1")
        assert parent.wait(40) == 0
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)  # reaped here, not warned about in a later test
        subprocess.run(["pkill", "-9", "-f", str(config)], check=False)
        listener.sock.close()
    # systemd with NotifyAccess=main: every message came from the supervisor itself.
    assert {pid for pid, _ in listener.got} == {parent.pid}, listener.got


def test_workers_refusing_their_config_stop_the_supervisor_with_exit_2(tmp_path: Path) -> None:
    """A processor that refuses its options fails in each worker (the supervisor only parses
    the file): exit 2 for systemd's RestartPreventExitStatus=2, not a restart loop."""
    config = tmp_path / "loghubd.toml"
    config.write_text(f"""
[source]
endpoint = "http://127.0.0.1:9"
project = "proj"
logstore = "logs"
[consumer]
group = "grp"
name = "bad"
[processor.jsonl]
path = "{tmp_path / "out"}"
colour = "red"
[ops]
listen = "127.0.0.1:{free_ports(2)}"
""")
    result = subprocess.run(
        [sys.executable, "-m", "loghubd", "run", "-c", str(config), "--workers", "2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr[-2000:] + result.stdout[-2000:]
    assert "processor.jsonl.colour" in result.stderr
    assert "worker_restarted" not in result.stdout + result.stderr
