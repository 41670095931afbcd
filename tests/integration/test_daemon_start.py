"""Where a shard without a checkpoint starts (`consumer.start`), and what an expired cursor
does: the configured start position (the beginning of the retained data), loudly.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

import pytest

from loghubd.protocol import cursor as cursors
from loghubd.testing.process import ServerProcess
from tests.integration.daemon_harness import (
    Daemon,
    Pool,
    assert_delivered_exactly,
    expected_ids,
    wait_until,
)

pytestmark = pytest.mark.slow

N = 2_000  # logs per phase


def consuming(daemon: Daemon, shards: int) -> bool:
    states = [s["state"] for s in daemon.status()["shards"]]
    return states == ["consuming"] * shards


def test_start_begin_end_and_timestamp(daemon_pool: Pool) -> None:
    pool = daemon_pool
    ls = "starts"
    pool.admin.create_logstore(ls, 2)
    pool.produce(ls, count=N, group_size=50, prefix="a").wait()
    # Every log of phase "a" was received before `ts`, every log of phase "b" at or after.
    ts = int(time.time()) + 1
    time.sleep(max(0.0, ts - time.time()) + 0.01)
    pool.produce(ls, count=N, group_size=50, prefix="b").wait()

    daemons = {
        start: pool.daemon(ls, f"from-{name}", name, consumer={"start": start})
        for start, name in (("begin", "begin"), (ts, "ts"), ("end", "end"))
    }
    for d in daemons.values():
        d.wait_ready()
        wait_until(functools.partial(consuming, d, 2), 10, d.log_tail)
    pool.produce(ls, count=N, group_size=50, prefix="c").wait()
    for d in daemons.values():
        wait_until(functools.partial(pool.committed_to_end, ls, d.group, 2), 30, d.log_tail)
        assert d.stop() == 0, d.log_tail()

    a, b, c = (expected_ids(p, N) for p in "abc")
    assert_delivered_exactly([daemons["begin"]], a + b + c)
    assert_delivered_exactly([daemons[ts]], b + c)
    assert_delivered_exactly([daemons["end"]], c)


def test_expired_cursor_restarts_at_the_beginning_of_retained_data(
    loghubd_server_factory: Callable[..., ServerProcess],
    daemon_pools: Callable[[ServerProcess], Pool],
) -> None:
    # One TTL day lasts 1 s. The logstore keeps logs for 3650 days (an hour) except between
    # the two daemons, when it keeps them for 1 day: the expiry happens then and only then, so
    # no daemon's start-up races a TTL on a loaded machine.
    server = loghubd_server_factory(
        "ttl-server", extra_args=["--ttl-day-seconds", "1", "--expire-interval", "0.2"]
    )
    pool = daemon_pools(server)
    ls, group = "short", "ttl-group"
    pool.admin.create_logstore(ls, 1, ttl=3650)

    first = pool.daemon(ls, group, "ttl").wait_ready()
    wait_until(lambda: consuming(first, 1), 10, first.log_tail)
    pool.produce(ls, count=500, group_size=50, prefix="a").wait()
    wait_until(lambda: pool.committed_to_end(ls, group, 1), 10, first.log_tail)
    assert first.stop() == 0, first.log_tail()
    checkpoint = pool.admin.checkpoints(ls, group)[0]["checkpoint"]

    # Written while the daemon is stopped, and expired before it comes back.
    pool.produce(ls, count=500, group_size=50, prefix="b").wait()
    after_b = cursors.to_seq(0, pool.admin.cursor(ls, 0, "end"))
    pool.admin.keep(ls, days=1)
    wait_until(
        lambda: cursors.to_seq(0, pool.admin.cursor(ls, 0, "begin")) >= after_b,
        25,
        "the logs written while the daemon was stopped did not expire",
        interval=0.2,
    )
    pool.admin.keep(ls, days=3650)
    pool.produce(ls, count=500, group_size=50, prefix="c").wait()  # retained at the restart

    second = pool.daemon(ls, group, "ttl")  # same name, directory and output
    wait_until(
        lambda: second.events("cursor_invalid_restarting"),
        15,
        lambda: f"no cursor_invalid_restarting warning:\n{second.log_tail()}",
    )
    pool.produce(ls, count=500, group_size=50, prefix="d").wait()
    wait_until(lambda: pool.committed_to_end(ls, group, 1), 15, second.log_tail)
    assert second.stop() == 0, second.log_tail()

    [warning] = second.events("cursor_invalid_restarting")
    assert warning["level"] == "warning" and warning["cursor"] == checkpoint, warning
    assert cursors.to_seq(0, warning["restart_at"]) == after_b, (warning, after_b)
    written = [*expected_ids("a", 500), *expected_ids("c", 500), *expected_ids("d", 500)]
    assert_delivered_exactly([second], written)  # b expired unread; c (retained) and d consumed


def test_a_stop_during_the_processor_factory_start_still_closes_it(daemon_pool: Pool) -> None:
    """SIGTERM while the factory's `start()` is still running (a sink slow to connect): the
    daemon stops at once and the factory's `close()` runs, for what its start opened."""
    pool = daemon_pool
    pool.admin.create_logstore("held-start", 1)
    held, closed = pool.dir / "start-held", pool.dir / "factory-closed"
    daemon = pool.daemon(
        "held-start",
        "held-start",
        "held",
        processor="record",
        processor_options={
            "path": str(pool.dir / "held.jsonl"),
            "start_held": str(held),
            "closed": str(closed),
        },
    )
    wait_until(held.exists, 20, "the factory's start() never ran")
    assert daemon.stop() == 0, daemon.log_tail()
    assert closed.exists(), daemon.log_tail()
