"""`loghubd group` and `loghubd status` end to end: real `loghubd serve`, real daemons.

A reset while the daemons run is refused (exit 5) unless --force, which says what the live
owners will do (and they do it: they go on from memory and their commits replace the reset);
a reset while they are stopped moves the start, and the ids the restarted daemons deliver
prove where they started. `status` also works against a service that answers serve's
`?type=status` extension as a plain GetCheckPoint (as SLS would answer an unknown `type`).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from loghubd.testing.process import ServerProcess
from tests.integration.daemon_harness import (
    PROJECT,
    Admin,
    Daemon,
    Producer,
    expected_ids,
    read_ids,
    read_records,
)
from tests.integration.recording_proxy import RecordingProxy
from tests.integration.sls_http import wait_until

LOGSTORE, GROUP = "opsstore", "opsgroup"


def loghubd(
    endpoint: str, *args: str, check_code: int | None = 0
) -> subprocess.CompletedProcess[str]:
    where = ["--endpoint", endpoint, "--project", PROJECT, "--logstore", LOGSTORE]
    done = subprocess.run(
        [sys.executable, "-m", "loghubd", *args, *where],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    if check_code is not None:
        assert done.returncode == check_code, (args, done.returncode, done.stdout, done.stderr)
    return done


def describe(endpoint: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        loghubd(endpoint, "group", "describe", GROUP, "--json").stdout
    )
    return data


def produce(tmp: Path, endpoint: str, prefix: str, count: int) -> list[str]:
    Producer(endpoint, LOGSTORE, count=count, prefix=prefix, group_size=10).start().wait()
    return expected_ids(prefix, count)


def caught_up(ep: str) -> bool:
    """Every shard's checkpoint at its end (in-process: cheaper than a CLI call per poll)."""
    admin = Admin(ep)
    cps = admin.checkpoints(LOGSTORE, GROUP)
    return len(cps) == 2 and all(
        cp["checkpoint"] == admin.cursor(LOGSTORE, s, "end") for s, cp in cps.items()
    )


def start_two(tmp_path: Path, ep: str, prefix: str = "d") -> list[Daemon]:
    daemons = [
        Daemon(tmp_path / f"{prefix}{i}", ep, LOGSTORE, GROUP, f"op{i}").start() for i in range(2)
    ]
    for d in daemons:
        d.wait_ready()
    return daemons


@pytest.mark.timeout(240)
def test_describe_and_reset_while_daemons_run(
    tmp_path: Path, loghubd_server: ServerProcess
) -> None:
    ep = loghubd_server.endpoint
    Admin(ep).create_logstore(LOGSTORE, 2)
    first = produce(tmp_path, ep, "a-", 200)
    daemons = start_two(tmp_path, ep)
    outputs = [d.output for d in daemons]
    try:
        wait_until(lambda: sorted(read_ids(outputs)) == sorted(first), 30)
        wait_until(lambda: caught_up(ep), 20)
        wait_until(lambda: sorted(len(d.held()) for d in daemons) == [1, 1], 20)

        listed = json.loads(loghubd(ep, "group", "list", "--json").stdout)
        assert [g["name"] for g in listed] == [GROUP]
        view = describe(ep)
        assert view["source"] == "loghubd serve"
        assert sorted(c["name"] for c in view["consumers"]) == ["op0", "op1"]
        assert all(c["live"] and c["heartbeat_age"] < 5 for c in view["consumers"])
        for d in daemons:
            assert {s["shard"] for s in view["shards"] if s["owner"] == d.name} == d.held()
        assert all(s["state"] == "assigned" and s["checkpoint_at"] for s in view["shards"])
        assert view["totals"] == {
            "shards": 2, "lag_log_groups": 0, "lag_logs": 0, "lag_logs_exact": True,
            "max_lag_seconds": 0,
        }  # fmt: skip
        text = loghubd(ep, "status", "--group", GROUP).stdout
        assert "op0" in text and "assigned" in text and "already_alloc" not in text

        # While live: the dry run shows the plan, --execute is refused, nothing moves.
        before = {s["shard"]: s["checkpoint"] for s in view["shards"]}
        plan = loghubd(ep, "group", "reset", GROUP, "--to", "begin").stdout
        assert "dry run" in plan and "live consumers (op0, op1)" in plan, plan
        refused = loghubd(ep, "group", "reset", GROUP, "--to", "begin", "--execute", check_code=5)
        assert "live consumers" in refused.stderr and "--force" in refused.stderr
        assert {
            s: cp["checkpoint"] for s, cp in Admin(ep).checkpoints(LOGSTORE, GROUP).items()
        } == before
        loghubd(ep, "group", "delete", GROUP, "--yes", check_code=5)  # live: refused too

        # --force: applied, and the explanation of what the live owners will do holds: they
        # go on from memory (no re-read of a-*), their next commits replace the reset.
        forced = loghubd(
            ep, "group", "reset", GROUP, "--to", "begin", "--execute", "--force"
        ).stdout
        assert "forced while live" in forced and "next commit" in forced, forced
        second = produce(tmp_path, ep, "b-", 100)
        wait_until(lambda: sorted(read_ids(outputs)) == sorted(first + second), 30)
        wait_until(lambda: caught_up(ep), 20)
        for d in daemons:
            assert d.stop() == 0, d.log_tail()
    finally:
        for d in daemons:
            if d.alive():
                d.kill()


@pytest.mark.timeout(240)
def test_reset_while_stopped_moves_where_the_daemons_start(
    tmp_path: Path, loghubd_server: ServerProcess
) -> None:
    ep = loghubd_server.endpoint
    Admin(ep).create_logstore(LOGSTORE, 2)
    first = produce(tmp_path, ep, "a-", 300)
    daemons = start_two(tmp_path, ep)
    outputs = [d.output for d in daemons]
    try:
        wait_until(lambda: sorted(read_ids(outputs)) == sorted(first), 30)
        wait_until(lambda: caught_up(ep), 20)
        for d in daemons:
            assert d.stop() == 0, d.log_tail()
        time.sleep(1.1)  # cursor times are whole seconds: `middle` is after every a-*
        middle = int(time.time())
        time.sleep(1.1)
        third = produce(tmp_path, ep, "c-", 100)
        stopped = describe(ep)
        assert not any(c["live"] for c in stopped["consumers"])
        assert stopped["totals"]["lag_logs"] == 100 and stopped["totals"]["lag_logs_exact"]
        assert stopped["totals"]["lag_log_groups"] == 10
        assert 0 <= stopped["totals"]["max_lag_seconds"] <= 60
        # --no-count: the lagging shards' logs are not counted, so neither is their total; the
        # stopped daemons committed last but own nothing (they used to show as OWNER)
        uncounted = loghubd(ep, "status", "--group", GROUP, "--no-count", "--json").stdout
        assert json.loads(uncounted)["totals"]["lag_logs"] is None
        text = loghubd(ep, "status", "--group", GROUP, "--no-count").stdout
        assert "lag 10 log groups, logs not counted," in text, text
        rows = [line.split() for line in text.splitlines() if line.split()[0] in ("0", "1")]
        assert len(rows) == 2 and all(r[1:3] == ["unassigned", "-"] for r in rows), text
        assert {r[-3] for r in rows} <= {"op0", "op1"}, text  # LAST COMMITTED BY

        loghubd(ep, "group", "reset", GROUP, "--to", str(middle - 1000), "--execute")
        everything = describe(ep)["totals"]
        assert everything["lag_logs"] == 400 and everything["lag_log_groups"] == 40
        assert 2 <= everything["max_lag_seconds"] <= 120  # a-* were written before the sleeps
        moved = json.loads(
            loghubd(ep, "group", "reset", GROUP, "--to", str(middle), "--execute", "--json").stdout
        )
        assert moved["executed"] and moved["live_consumers"] == []
        assert describe(ep)["totals"]["lag_logs"] == 100
        restarted = start_two(tmp_path, ep, "r")
        daemons += restarted
        new_outputs = [d.output for d in restarted]
        wait_until(lambda: len(read_ids(new_outputs)) >= 100, 30)
        wait_until(lambda: caught_up(ep), 20)
        assert sorted(read_ids(new_outputs)) == sorted(third), "restart began at the reset"
        for d in restarted:
            assert d.stop() == 0, d.log_tail()

        # One shard to its beginning: exactly that shard's logs again.
        loghubd(ep, "group", "reset", GROUP, "--to", "begin", "--shards", "0", "--execute")
        shard0 = sorted(str(r["id"]) for s, r in read_records(outputs + new_outputs) if s == 0)
        again = Daemon(tmp_path / "s0", ep, LOGSTORE, GROUP, "op0").start()
        daemons.append(again)
        wait_until(lambda: len(read_ids([again.output])) >= len(shard0), 30)
        wait_until(lambda: caught_up(ep), 20)
        assert sorted(read_ids([again.output])) == shard0
        assert again.stop() == 0, again.log_tail()

        # Delete: needs --yes without a terminal; then the group is gone, named in one line.
        loghubd(ep, "group", "delete", GROUP, check_code=5)
        loghubd(ep, "group", "delete", GROUP, "--yes")
        assert json.loads(loghubd(ep, "group", "list", "--json").stdout) == []
        gone = loghubd(ep, "group", "describe", GROUP, check_code=3)
        assert f"consumer group '{GROUP}' does not exist" in gone.stderr
    finally:
        for d in daemons:
            if d.alive():
                d.kill()


def test_status_against_a_service_without_the_status_extension(
    tmp_path: Path, loghubd_server: ServerProcess
) -> None:
    """SLS answers `?type=status` (a type it does not know) as a plain GetCheckPoint: a JSON
    list. The proxy makes the real server do the same; status falls back to standard calls."""
    ep = loghubd_server.endpoint
    Admin(ep).create_logstore(LOGSTORE, 2)
    produce(tmp_path, ep, "a-", 100)
    daemon = Daemon(tmp_path / "d", ep, LOGSTORE, GROUP, "plain").start()

    def drop_status(path: str, query: dict[str, str]) -> dict[str, str]:
        return {k: v for k, v in query.items() if not (k == "type" and v == "status")}

    try:
        daemon.wait_ready()
        wait_until(lambda: len(read_ids([daemon.output])) == 100, 30)
        with RecordingProxy(loghubd_server.port, rewrite_query=drop_status) as proxy:

            def view() -> dict[str, Any]:
                out = loghubd(proxy.endpoint, "status", "--group", GROUP, "--json").stdout
                data: dict[str, Any] = json.loads(out)
                return data

            wait_until(lambda: view()["totals"]["lag_log_groups"] == 0, 20)
            v = view()
            status_calls = [r for r in proxy.take() if r.query.get("type") == "status"]
            assert status_calls, "status asked for the extension (and got a plain list)"
            assert v["source"] == "checkpoints"
            (consumer,) = v["consumers"]
            assert consumer["heartbeat_age"] is None and consumer["commit_age"] is not None
            # No consumer list in the standard calls: live means "committed within the timeout"
            assert consumer["live"] == (consumer["commit_age"] <= v["timeout"])
            assert all(s["committed_by"] == "plain" and s["state"] == "" for s in v["shards"])
            text = loghubd(proxy.endpoint, "status", "--group", GROUP).stdout
            assert "liveness is a guess" in text
    finally:
        assert daemon.stop() == 0, daemon.log_tail()


def test_a_forced_delete_under_a_live_daemon_says_what_it_did_to_it(
    tmp_path: Path, loghubd_server: ServerProcess
) -> None:
    """`group delete --force` while a daemon consumes: the command warns that the daemon now
    consumes nothing until restarted (it cannot heartbeat into a group that is gone), the
    daemon's /readyz says why, and its stop logs `group_gone` (before: `leave_not_supported`,
    which blamed the service)."""
    ep = loghubd_server.endpoint
    Admin(ep).create_logstore(LOGSTORE, 1)
    d = Daemon(tmp_path / "gone", ep, LOGSTORE, GROUP, "op-gone").start()
    try:
        d.wait_ready()
        done = loghubd(ep, "group", "delete", GROUP, "--yes", "--force")
        assert "deleted group" in done.stdout
        assert "op-gone" in done.stderr and "until restarted" in done.stderr, done.stderr
        wait_until(lambda: "ConsumerGroupNotExist" in json.dumps(d.readiness()), 20, d.log_tail)
        d.stop()
        assert d.events("group_gone") and not d.events("leave_not_supported"), d.log_tail()
    finally:
        if d.alive():
            d.kill()
