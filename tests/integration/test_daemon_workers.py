"""`loghubd run --workers N`: N consumers of one group on this host, each with its own ops
port, a dead one restarted, SIGTERM forwarded to all, every log delivered; a worker that
cannot start (its ops port taken) stops them all instead of being restarted for ever."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from loghubd.protocol import errors as E
from loghubd.testing import PortReservation, ServerProcess, free_ports
from tests.integration.daemon_harness import PROJECT, Admin, Producer, read_ids, wait_until

pytestmark = pytest.mark.slow


def test_workers_share_the_group_restart_and_stop_together(
    tmp_path: Path, loghubd_server: ServerProcess
) -> None:
    admin = Admin(loghubd_server.endpoint)
    admin.create_logstore("pool", 4)
    out = tmp_path / "out"
    ports = PortReservation(2)  # worker i listens on port + i; held for the whole test
    port = ports.port
    config = tmp_path / "loghubd.toml"
    config.write_text(f"""
[source]
endpoint = "{loghubd_server.endpoint}"
project = "{PROJECT}"
logstore = "pool"
[consumer]
group = "workers"
name = "host"
heartbeat_interval = 1.0
timeout = 4.0
checkpoint_interval = 1.0
fetch_interval = 0.05
idle_fetch_interval = 0.05
[processor.jsonl]
path = "{out}"
rotate_seconds = 1
[ops]
listen = "127.0.0.1:{port}"
[log]
format = "json"
""")
    # One directory for both workers, rotated every second: each worker's clock also looks at
    # the files of the shards it does not hold (the other worker's, a killed one's), taking
    # their locks for a moment (docs/jsonl.md, "Shards that moved away").
    with open(tmp_path / "workers.log", "wb") as log:  # the child keeps its own descriptor
        parent = subprocess.Popen(
            [sys.executable, "-m", "loghubd", "run", "-c", str(config), "--workers", "2"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:

        def consumers() -> list[str]:
            try:
                return sorted(admin.group_status("pool", "workers")["consumers"])
            except E.ConsumerGroupNotExist:  # not created by the first worker yet
                return []

        wait_until(
            lambda: consumers() == ["host-0", "host-1"],
            20,
            lambda: (tmp_path / "workers.log").read_text()[-3000:],
        )
        # each worker answers on its own ops port
        for i in range(2):
            status = json.loads(
                urllib.request.urlopen(f"http://127.0.0.1:{port + i}/status", timeout=3).read()
            )
            assert status["consumer"] == f"host-{i}"
        wait_until(lambda: sorted(len(s) for s in _held(admin).values()) == [2, 2], 15)
        Producer(loghubd_server.endpoint, "pool", count=4_000, prefix="w").start().wait()
        # kill -9 one worker: the parent restarts it under the same name
        pids = _pids("host-0", parent.pid, config)
        assert pids, "worker host-0 not found"
        os.kill(pids[0], signal.SIGKILL)
        wait_until(
            lambda: any(p not in pids for p in _pids("host-0", parent.pid, config)),
            20,
            "host-0 not restarted",
        )
        Producer(
            loghubd_server.endpoint, "pool", count=4_000, prefix="w", start=4_000
        ).start().wait()
        wait_until(lambda: set(read_ids([out])) >= {f"w{i}" for i in range(8_000)}, 30)
        # A stop while a dead worker waits for its restart (1 s back-off) cancels the restart:
        # a worker started after the stop would never get the signal, and the parent would
        # wait for it for ever (it did, when the back-off was a sleep in its loop).
        os.kill(_pids("host-1", parent.pid, config)[0], signal.SIGKILL)
        wait_until(
            lambda: (
                '"worker_died"' in (tmp_path / "workers.log").read_text()
                and "host-1" in (tmp_path / "workers.log").read_text().split('"worker_died"')[-1]
            ),
            5,
        )
        parent.send_signal(signal.SIGTERM)
        assert parent.wait(40) == 0
        assert not _pids("host-1", parent.pid, config), "a worker was started after the stop"
        wait_until(lambda: consumers() == [], 10)
        # Every line whole (read_ids parses each), the closed files among them, and no look
        # at the other worker's shards failed.
        assert set(read_ids([out])) >= {f"w{i}" for i in range(8_000)}
        assert len(list(out.glob("shard-*.*Z.jsonl"))) >= 4
        assert "jsonl_unheld_shard_failed" not in (tmp_path / "workers.log").read_text()
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)  # reaped here, not warned about in a later test
        subprocess.run(["pkill", "-9", "-f", str(config)], check=False)


def test_a_worker_whose_ops_port_is_taken_stops_the_supervisor_with_exit_4(
    tmp_path: Path, loghubd_server: ServerProcess
) -> None:
    """host-1's port (ops.listen + 1) is held by another process: host-1 exits 4 ("a local
    port is taken") before it was ever ready. A restart cannot cure that: the supervisor says
    which worker and why, stops host-0 gracefully (SIGTERM: it exits 0) and exits 4 itself,
    instead of restarting host-1 every 5 s for ever."""
    Admin(loghubd_server.endpoint).create_logstore("taken", 2)
    port = free_ports(2)
    config = tmp_path / "loghubd.toml"
    config.write_text(f"""
[source]
endpoint = "{loghubd_server.endpoint}"
project = "{PROJECT}"
logstore = "taken"
[consumer]
group = "taken"
name = "host"
heartbeat_interval = 1.0
timeout = 4.0
[processor.jsonl]
path = "{tmp_path / "out"}"
[ops]
listen = "127.0.0.1:{port}"
[log]
format = "json"
""")
    log_path, err_path = tmp_path / "workers.log", tmp_path / "workers.err"
    with socket.socket() as squatter:  # listening: SO_REUSEADDR does not get past it
        squatter.bind(("127.0.0.1", port + 1))
        squatter.listen()
        with open(log_path, "wb") as log, open(err_path, "wb") as err:
            parent = subprocess.Popen(
                [sys.executable, "-m", "loghubd", "run", "-c", str(config), "--workers", "2"],
                stdout=log,
                stderr=err,
            )
        try:
            code = parent.wait(15)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            if parent.poll() is None:
                parent.kill()
                parent.wait(10)
            left = subprocess.run(
                ["pgrep", "-f", "--", str(config)], capture_output=True, text=True
            ).stdout.split()
            subprocess.run(["pkill", "-9", "-f", "--", str(config)], check=False)
    out, err_text = log_path.read_text(), err_path.read_text()
    assert code == 4, f"exit {code}\n{err_text[-2000:]}\n{out[-3000:]}"
    # the worker's own line names the port and the fix
    assert f"ops.listen 127.0.0.1:{port + 1} is already in use" in err_text, err_text
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    failed = [e for e in events if e["event"] == "worker_cannot_start"]
    assert len(failed) == 1, out[-3000:]
    assert failed[0]["name"] == "host-1" and failed[0]["exit_code"] == 4
    assert failed[0]["ops_listen"] == f"127.0.0.1:{port + 1}"
    assert "port is taken" in failed[0]["reason"]
    assert not [e for e in events if e["event"] in ("worker_died", "worker_restarted")], out
    # host-0 was stopped by the SIGTERM the supervisor forwarded, and nothing is left. It
    # started as fast as host-1 failed, so it has almost always joined the group by then and
    # shuts down gracefully (exit 0: no `worker_stopped` line, which names a worker that exited
    # otherwise); on a loaded machine the SIGTERM may come while it still imports (before it
    # handles signals), ending it at once: nothing to commit yet.
    assert left == [], f"processes left: {left}"
    stopped = [e for e in events if e["event"] == "worker_stopped"]
    assert all(e["name"] == "host-0" and e["exit_code"] == -signal.SIGTERM for e in stopped)
    if any(e["event"] == "consumer_started" for e in events):
        assert not stopped, out[-3000:]
        assert any(e["event"] == "left_group" and e["consumer"] == "host-0" for e in events)


def _pids(name: str, parent: int, config: Path) -> list[int]:
    """The workers named `name` of this test's daemon (its config file in their command
    line: a test running beside it may have a `host-1` of its own)."""
    pattern = f"{re.escape(str(config))}.*--name {name}"
    found = subprocess.run(["pgrep", "-f", "--", pattern], capture_output=True, text=True)
    return [int(p) for p in found.stdout.split() if int(p) != parent]


def _held(admin: Admin) -> dict[str, list[int]]:
    owners: dict[str, list[int]] = {}
    for shard in admin.group_status("pool", "workers")["shards"]:
        if shard["owner"]:
            owners.setdefault(shard["owner"], []).append(shard["shard"])
    return owners
