"""The operations surface of real daemons: Prometheus metrics, health and readiness across a
server outage, `loghubd status` on a group of three, and sd_notify over a real socket."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from loghubd.testing import ServerProcess
from tests.integration.daemon_harness import (
    PROJECT,
    Admin,
    Daemon,
    Producer,
    wait_until,
)

pytestmark = pytest.mark.slow

# Every family the operator documentation promises (counters without their _total suffix,
# as the parser names families).
DAEMON_METRICS = {
    "loghubd_consumed_logs",
    "loghubd_consumed_bytes",
    "loghubd_consumed_batches",
    "loghubd_fetch_duration_seconds",
    "loghubd_process_duration_seconds",
    "loghubd_lag_log_groups",
    "loghubd_lag_logs",
    "loghubd_lag_seconds",
    "loghubd_checkpoint_age_seconds",
    "loghubd_last_batch_timestamp_seconds",
    "loghubd_held_shards",
    "loghubd_heartbeat_duration_seconds",
    "loghubd_heartbeat_failures",
    "loghubd_rebalance_shards",
    "loghubd_processor_errors",
    "loghubd_processor_retries",
    "loghubd_dead_lettered_batches",
    "loghubd_bytes_in_flight",
    "loghubd_checkpoint_commits",
}


def families(text: str) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    out: dict[str, list[tuple[str, dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        out[family.name] = [(s.name, s.labels, s.value) for s in family.samples]
    return out


def sample_sum(
    fams: dict[str, list[tuple[str, dict[str, str], float]]], family: str, sample: str
) -> float:
    return sum(v for name, _labels, v in fams.get(family, []) if name == sample)


def http_status(url: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(url, timeout=3) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())


def test_metrics_count_what_was_written_and_lag_reaches_zero(
    tmp_path: Path, loghubd_server: ServerProcess
) -> None:
    admin = Admin(loghubd_server.endpoint)
    admin.create_logstore("metrics", 4)
    daemon = Daemon(tmp_path / "d", loghubd_server.endpoint, "metrics", "grp", "m1").start()
    try:
        daemon.wait_ready()
        t_written = time.time()
        summary = (
            Producer(loghubd_server.endpoint, "metrics", count=20_000, group_size=100)
            .start()
            .wait()
        )
        written = summary["written"]

        def caught_up() -> bool:
            fams = families(daemon.metrics())
            consumed = sample_sum(fams, "loghubd_consumed_logs", "loghubd_consumed_logs_total")
            lags = [v for name, _l, v in fams.get("loghubd_lag_log_groups", [])]
            return consumed >= written and len(lags) == 4 and all(v == 0 for v in lags)

        wait_until(caught_up, 30, lambda: daemon.metrics()[-2000:])
        fams = families(daemon.metrics())
        missing = DAEMON_METRICS - set(fams)
        assert not missing, f"metric families missing: {sorted(missing)}"
        assert sample_sum(fams, "loghubd_consumed_logs", "loghubd_consumed_logs_total") == written
        per_shard = {
            labels["shard"]
            for name, labels, _v in fams["loghubd_consumed_logs"]
            if name == "loghubd_consumed_logs_total"
        }
        assert per_shard == {"0", "1", "2", "3"}
        assert sample_sum(fams, "loghubd_held_shards", "loghubd_held_shards") == 4
        assert all(v == 0 for _n, _l, v in fams["loghubd_lag_logs"])
        assert all(v == 0 for _n, _l, v in fams["loghubd_lag_seconds"])
        # every shard finished a batch after the writes began (and not in the future)
        last = {
            labels["shard"]: v for _n, labels, v in fams["loghubd_last_batch_timestamp_seconds"]
        }
        assert set(last) == {"0", "1", "2", "3"}
        assert all(t_written <= v <= time.time() for v in last.values()), last
        assert (
            sample_sum(fams, "loghubd_heartbeat_failures", "loghubd_heartbeat_failures_total") == 0
        )
        # the server's own metrics agree on what was ingested
        server = families(
            urllib.request.urlopen(f"{loghubd_server.endpoint}/metrics", timeout=3).read().decode()
        )
        assert (
            sample_sum(server, "loghubd_server_ingest_logs", "loghubd_server_ingest_logs_total")
            == written
        )
        assert {
            "loghubd_server_requests",
            "loghubd_server_stored_bytes",
            "loghubd_server_group_consumers",
            "loghubd_server_group_shards",
        } <= set(server)
    finally:
        assert daemon.stop() == 0


def test_readyz_follows_the_server_and_healthz_stays_up(
    tmp_path: Path, loghubd_server: ServerProcess
) -> None:
    admin = Admin(loghubd_server.endpoint)
    admin.create_logstore("ready", 2)
    daemon = Daemon(tmp_path / "d", loghubd_server.endpoint, "ready", "grp", "r1").start()
    base = f"http://127.0.0.1:{daemon.ops_port}"
    try:
        daemon.wait_ready()
        wait_until(lambda: http_status(f"{base}/readyz")[0] == 200, 10)
        loghubd_server.kill(signal.SIGKILL)
        wait_until(lambda: http_status(f"{base}/readyz")[0] == 503, 15)
        code, body = http_status(f"{base}/readyz")
        assert code == 503
        reasons = " ".join(str(r) for r in body["reasons"])  # type: ignore[union-attr]
        assert "heartbeat" in reasons or "joined" in reasons, body
        assert http_status(f"{base}/healthz") == (200, {"status": "alive"})
        loghubd_server.start()
        wait_until(lambda: http_status(f"{base}/readyz")[0] == 200, 20)
        assert http_status(f"{base}/healthz")[0] == 200
    finally:
        assert daemon.stop() == 0


def test_status_describes_a_group_of_three(tmp_path: Path, loghubd_server: ServerProcess) -> None:
    admin = Admin(loghubd_server.endpoint)
    admin.create_logstore("described", 6)
    Producer(loghubd_server.endpoint, "described", count=3_000).start().wait()
    daemons = [
        Daemon(tmp_path / f"d{i}", loghubd_server.endpoint, "described", "grp", f"c{i}").start()
        for i in range(3)
    ]
    try:
        for d in daemons:
            d.wait_ready()
        wait_until(lambda: sorted(len(d.held()) for d in daemons) == [2, 2, 2], 15)

        def run_status(*extra: str) -> str:
            """`loghubd status` for the group, as an operator would run it."""
            return subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "loghubd",
                    "status",
                    "--endpoint",
                    loghubd_server.endpoint,
                    "--project",
                    PROJECT,
                    "--logstore",
                    "described",
                    "--group",
                    "grp",
                    *extra,
                ],
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            ).stdout

        def status() -> dict[str, object]:
            parsed: dict[str, object] = json.loads(run_status("--json"))
            return parsed

        def settled() -> bool:
            shards = status()["shards"]
            return all(s["lag_log_groups"] == 0 for s in shards)  # type: ignore[attr-defined,index]

        wait_until(settled, 20)
        desc = status()
        consumers = desc["consumers"]
        assert sorted(c["name"] for c in consumers) == ["c0", "c1", "c2"]  # type: ignore[attr-defined,index]
        assert all(c["live"] and c["heartbeat_age"] < 10 for c in consumers)  # type: ignore[attr-defined,index]
        shards = desc["shards"]
        assert [s["shard"] for s in shards] == list(range(6))  # type: ignore[attr-defined,index]
        owners = {s["shard"]: s["owner"] for s in shards}  # type: ignore[attr-defined,index]
        for d in daemons:
            assert {s for s, o in owners.items() if o == d.name} == d.held()
        # operator words, not the coordinator's internal state names
        assert all(s["state"] == "assigned" for s in shards)  # type: ignore[attr-defined,index]
        assert all(s["checkpoint"] for s in shards)  # type: ignore[attr-defined,index]
        text = run_status()
        assert "assigned" in text and "c0" in text and "LAG" in text
        assert "already_alloc" not in text
    finally:
        for d in daemons:
            assert d.stop() == 0


def _receive_until(
    sock: socket.socket, want: Callable[[list[str]], bool], timeout: float
) -> list[str]:
    got: list[str] = []
    deadline = time.monotonic() + timeout
    while not want(got):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"sd_notify messages so far: {got}")
        sock.settimeout(remaining)
        try:
            got.append(sock.recv(4096).decode())
        except TimeoutError:
            continue
    return got


def test_systemd_notifications_ready_watchdog_stopping(
    tmp_path: Path, loghubd_server: ServerProcess
) -> None:
    Admin(loghubd_server.endpoint).create_logstore("notify", 1)
    address = str(tmp_path / "notify.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(address)
        daemon = Daemon(
            tmp_path / "d",
            loghubd_server.endpoint,
            "notify",
            "grp",
            "n1",
            env={"NOTIFY_SOCKET": address, "WATCHDOG_USEC": "1000000", "WATCHDOG_PID": ""},
        ).start()
        try:
            got = _receive_until(sock, lambda m: "READY=1" in m and m.count("WATCHDOG=1") >= 2, 20)
            assert got.index("READY=1") < got.index("WATCHDOG=1")
            daemon.signal(signal.SIGTERM)
            got += _receive_until(sock, lambda m: "STOPPING=1" in m, 20)
            assert daemon.wait(30) == 0
        finally:
            daemon.kill()
    assert os.path.exists(address)


def test_status_needs_the_bearer_token_when_one_is_configured(
    tmp_path: Path, loghubd_server: ServerProcess
) -> None:
    Admin(loghubd_server.endpoint).create_logstore("guarded", 1)
    daemon = Daemon(tmp_path / "d", loghubd_server.endpoint, "guarded", "grp", "t1")
    daemon.config["ops"]["status_token"] = "s3cr3t-token"
    daemon.start()
    base = f"http://127.0.0.1:{daemon.ops_port}"
    try:

        def alive() -> bool:
            try:
                return http_status(f"{base}/healthz")[0] == 200
            except urllib.error.URLError:  # not listening yet
                return False

        wait_until(alive, 20, daemon.log_tail)
        code, body = http_status(f"{base}/status")
        assert code == 401, body
        wrong = urllib.request.Request(f"{base}/status", headers={"Authorization": "Bearer nope"})
        began = time.monotonic()
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(wrong, timeout=5)
        refused.value.close()
        assert refused.value.code == 401
        # a wrong token is held back (guessing is slow) and said, once per address and window
        assert time.monotonic() - began >= 0.9
        (said,) = daemon.events("status_token_refused")
        assert said["remote"] == "127.0.0.1" and said["level"] == "warning", said
        right = urllib.request.Request(
            f"{base}/status", headers={"Authorization": "Bearer s3cr3t-token"}
        )
        with urllib.request.urlopen(right, timeout=3) as resp:
            assert json.loads(resp.read())["consumer"] == "t1"
        # the other endpoints stay open: probes and scrapers carry no token
        wait_until(lambda: http_status(f"{base}/readyz")[0] == 200, 20, daemon.log_tail)
        with urllib.request.urlopen(f"{base}/metrics", timeout=3) as resp:
            assert "loghubd_held_shards" in resp.read().decode()
        assert "s3cr3t-token" not in daemon.log_path.read_text()
    finally:
        assert daemon.stop() == 0
