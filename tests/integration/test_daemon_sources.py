"""Several logstores in one daemon (`[[sources]]`): two `loghubd serve` processes, one source
each, with its own consumer group and processor, in one `loghubd run` process.

Every log of both is delivered; the metrics and the log lines carry the source's name;
stopping one source's server leaves the other consuming while `/readyz` says which source is
down; a source that cannot start at all (its logstore does not exist) is reported and does
not stop the other.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from loghubd.testing.process import ServerProcess
from tests.integration.daemon_harness import (
    Admin,
    Daemon,
    Pool,
    delivery_report,
    plugin_env,
    read_ids,
    short,
    source_entry,
    wait_until,
)

pytestmark = pytest.mark.slow

N = 3_000  # logs per phase and source


def exactly(written: list[str], delivered: list[str]) -> dict[str, object]:
    report = delivery_report(written, delivered)
    return {k: short(v) for k, v in report.items() if v}


def record_ids(path: Path) -> list[str]:
    """The ids the `record` test processor wrote (one JSON line per log)."""
    if not path.exists():
        return []
    return [str(json.loads(line)["id"]) for line in path.read_text().splitlines() if line]


def source_state(daemon: Daemon, name: str) -> str:
    try:
        return str(daemon.source_status(name)["state"])
    except OSError:  # the ops listener is not up yet
        return ""


def all_joined(daemon: Daemon) -> bool:
    try:
        return all(s["joined"] for s in daemon.status()["sources"])
    except OSError:
        return False


def test_two_logstores_two_groups_two_processors_and_one_server_down(
    loghubd_server_factory: Callable[..., ServerProcess],
    daemon_pools: Callable[[ServerProcess], Pool],
    tmp_path: Path,
) -> None:
    server_a, server_b = loghubd_server_factory("server-a"), loghubd_server_factory("server-b")
    pool_a, pool_b = daemon_pools(server_a), daemon_pools(server_b)
    pool_a.admin.create_logstore("alpha", 2)
    pool_b.admin.create_logstore("beta", 3)
    recorded = tmp_path / "beta-records.jsonl"
    daemon = pool_a.daemon(
        "unused",
        "unused",
        "multi",
        env=plugin_env(tmp_path / "site"),
        sources=[
            source_entry("a", server_a.endpoint, "alpha", consumer={"group": "group-a"}),
            source_entry(
                "b",
                server_b.endpoint,
                "beta",
                consumer={"group": "group-b"},
                processor={"name": "record", "record": {"path": str(recorded)}},
            ),
        ],
    )
    out_a = daemon.outputs["a"]
    wait_until(lambda: all_joined(daemon), 20, daemon.log_tail)

    a1 = pool_a.produce("alpha", count=N, prefix="a1-")
    b1 = pool_b.produce("beta", count=N, prefix="b1-")
    a1.wait(), b1.wait()
    wait_until(lambda: len(read_ids([out_a])) >= N, 30, daemon.log_tail)
    wait_until(lambda: len(record_ids(recorded)) >= N, 30, daemon.log_tail)
    assert not exactly(a1.ids, read_ids([out_a]))
    assert not exactly(b1.ids, record_ids(recorded))
    assert {s["name"]: s["group"] for s in daemon.status()["sources"]} == {
        "a": "group-a",
        "b": "group-b",
    }
    # Metrics and log lines name their source.
    assert daemon.metric("loghubd_consumed_logs_total", source="a") == N
    assert daemon.metric("loghubd_consumed_logs_total", source="b") == N
    assert daemon.metric("loghubd_held_shards", source="b") == 3
    started = daemon.events("shard_started")
    assert sorted((e["source"], e["group"], e["shard"]) for e in started) == [
        ("a", "group-a", 0),
        ("a", "group-a", 1),
        ("b", "group-b", 0),
        ("b", "group-b", 1),
        ("b", "group-b", 2),
    ]
    assert daemon.readiness()[0] == 200

    # Server b goes away: source b is not ready (and says so), source a goes on.
    server_b.kill(signal.SIGKILL)
    _code, body = wait_until(lambda: (r := daemon.readiness())[0] == 503 and r, 15, daemon.log_tail)
    reasons = body["reasons"]
    assert reasons and all(r.startswith("source b: ") for r in reasons), body
    a2 = pool_a.produce("alpha", count=N, prefix="a2-")
    a2.wait()
    wait_until(lambda: len(read_ids([out_a])) >= 2 * N, 30, daemon.log_tail)
    assert not exactly(a1.ids + a2.ids, read_ids([out_a]))
    assert daemon.source_status("a")["joined"]
    assert daemon.readiness()[0] == 503

    # It comes back (same data): b catches up with what is written meanwhile.
    server_b.start()
    b2 = pool_b.produce("beta", count=N, prefix="b2-")
    b2.wait()
    wait_until(lambda: len(record_ids(recorded)) >= 2 * N, 30, daemon.log_tail)
    wait_until(lambda: daemon.readiness()[0] == 200, 20, lambda: str(daemon.readiness()))
    assert daemon.stop() == 0, daemon.log_tail()
    assert not exactly(a1.ids + a2.ids, read_ids([out_a]))
    assert not exactly(b1.ids + b2.ids, record_ids(recorded))


def test_a_source_that_cannot_start_does_not_stop_the_others(daemon_pool: Pool) -> None:
    pool = daemon_pool
    pool.admin.create_logstore("present", 2)
    daemon = pool.daemon(
        "unused",
        "unused",
        "partial",
        sources=[
            source_entry("ok", pool.endpoint, "present", consumer={"group": "grp"}),
            source_entry("broken", pool.endpoint, "missing", consumer={"group": "grp"}),
        ],
    )
    wait_until(lambda: source_state(daemon, "broken") == "failed", 20, daemon.log_tail)
    assert "LogStoreNotExist" in daemon.source_status("broken")["error"]
    wait_until(lambda: daemon.source_status("ok")["joined"], 20, daemon.log_tail)
    produced = pool.produce("present", count=N, prefix="p-")
    produced.wait()
    out = daemon.outputs["ok"]
    wait_until(lambda: len(read_ids([out])) >= N, 30, daemon.log_tail)
    assert not exactly(produced.ids, read_ids([out]))
    code, body = daemon.readiness()
    assert code == 503
    assert body["reasons"] == [
        f"source broken: cannot start: {daemon.source_status('broken')['error']}"
    ]
    [event] = daemon.events("source_cannot_start")
    assert event["source"] == "broken" and event["level"] == "error"
    # The healthy source shut down cleanly, but not everything configured ran: exit 1.
    assert daemon.stop() == 1, daemon.log_tail()
    assert daemon.events("left_group")[0]["source"] == "ok"


def test_every_source_failing_to_start_exits_at_once(daemon_pool: Pool) -> None:
    daemon_pool.admin.create_logstore("other", 1)  # the project exists, the logstores do not
    daemon = daemon_pool.daemon(
        "unused",
        "unused",
        "hopeless",
        sources=[
            source_entry("x", daemon_pool.endpoint, "nope-x", consumer={"group": "grp"}),
            source_entry("y", daemon_pool.endpoint, "nope-y", consumer={"group": "grp"}),
        ],
    )
    assert daemon.wait(20) == 3  # not found (README, "Exit codes"): systemd does not restart it
    text = daemon.log_path.read_text()
    # operator words, naming the group, where, and the service's answer (no internal names)
    want_x = "cannot start: source x: finding or creating consumer group grp on daemontest/nope-x"
    assert want_x in text, text[-2000:]
    assert "LogStoreNotExist" in text and "ensure_group" not in text
    assert "source y: finding or creating consumer group grp on daemontest/nope-y" in text


def test_a_group_name_the_service_refuses_is_a_configuration_error(daemon_pool: Pool) -> None:
    """A name the service refuses (too short) is the configuration's fault: exit 2, which
    the shipped systemd unit does not restart, rather than 1 and a restart every 2 s. The
    config check knows the service's rule, so the daemon says so before it asks."""
    daemon_pool.admin.create_logstore("named", 1)
    daemon = daemon_pool.daemon("named", "g", "badname")
    assert daemon.wait(20) == 2, daemon.log_tail()
    text = daemon.log_path.read_text()
    assert "consumer.group: must be 2 to 128 characters long, got 1: 'g'" in text, text[-2000:]


def test_admin_sees_both_groups(
    loghubd_server_factory: Callable[..., ServerProcess],
    daemon_pools: Callable[[ServerProcess], Pool],
) -> None:
    """Two sources on ONE server and logstore, with two groups: each group gets everything."""
    server = loghubd_server_factory("shared")
    pool = daemon_pools(server)
    pool.admin.create_logstore("shared", 2)
    daemon = pool.daemon(
        "unused",
        "unused",
        "twice",
        sources=[
            source_entry("first", server.endpoint, "shared", consumer={"group": "grp-1"}),
            source_entry("second", server.endpoint, "shared", consumer={"group": "grp-2"}),
        ],
    )
    wait_until(lambda: all_joined(daemon), 20, daemon.log_tail)
    produced = pool.produce("shared", count=N, prefix="s-")
    produced.wait()
    for name in ("first", "second"):
        out = daemon.outputs[name]
        wait_until(lambda out=out: len(read_ids([out])) >= N, 30, daemon.log_tail)
        assert not exactly(produced.ids, read_ids([out]))
    admin = Admin(server.endpoint)
    for group in ("grp-1", "grp-2"):
        owners = admin.owners("shared", group)
        assert set(owners.values()) == {"twice"}, owners
    assert daemon.stop() == 0, daemon.log_tail()
