"""SIGTERM ends the daemon even when a processor never returns (issue #13, item 8).

A real daemon, two shards; shard 0's processor gets stuck in its second batch (a synchronous
`process()` blocking its worker thread for ever, or an asynchronous one awaiting for ever,
shielded from cancellation), shard 1 reads everything. After SIGTERM the process exits with
code 1 within `shutdown_grace` plus a small fixed bound, names the stuck shard, and has
committed everything that finished: shard 1 to its end, shard 0 past its first batch only.
A second signal during the grace ends the process at once.
"""

from __future__ import annotations

import signal
import time

import pytest

from loghubd.protocol import errors as E
from loghubd.shutdown import SAME_STOP_S
from tests.integration.daemon_harness import Daemon, Pool, read_ids, seq_of, wait_until

pytestmark = pytest.mark.slow

GRACE = 3.0
# What the shutdown may take beyond the grace (see docs/shutdown.md: 2 s for cancelled tasks
# to end, the final commits and the leave); the rest is room for a loaded machine.
BOUND = 5.0
GROUPS_PER_PULL = 2
LOGS_PER_GROUP = 20


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_sigterm_ends_the_process_despite_a_stuck_processor(daemon_pool: Pool, kind: str) -> None:
    pool = daemon_pool
    logstore = f"stuck-{kind}"
    pool.admin.create_logstore(logstore, 2)
    pool.produce(logstore, count=400, group_size=LOGS_PER_GROUP, prefix="s").wait()
    out = pool.dir / f"out-{kind}"
    daemon = pool.daemon(
        logstore,
        "stuck",
        f"stuck-{kind}",
        processor="stuck",
        processor_options={"path": str(out), "kind": kind, "stuck_shard": 0, "after": 1},
        consumer={"shutdown_grace": GRACE, "max_fetch_log_groups": GROUPS_PER_PULL},
    )
    end1 = pool.admin.cursor(logstore, 1, "end")
    begin0 = pool.admin.cursor(logstore, 0, "begin")

    def settled() -> bool:
        try:
            checkpoints = pool.admin.checkpoints(logstore, "stuck")
        except E.ConsumerGroupNotExist:  # the daemon has not created it yet
            return False
        done1 = checkpoints.get(1, {}).get("checkpoint") == end1
        return (out / "stuck-0").exists() and done1

    wait_until(settled, 30, lambda: f"never settled:\n{daemon.log_tail()}")
    started = time.monotonic()
    daemon.signal(signal.SIGTERM)
    code = daemon.wait(GRACE + 30)
    took = time.monotonic() - started
    print(f"{kind}: exit {code} after {took:.2f} s (grace {GRACE} s)")

    assert code == 1, daemon.log_tail()
    assert GRACE - 0.2 <= took <= GRACE + BOUND, (took, daemon.log_tail())
    (line,) = daemon.events("shutdown_stuck_shards")
    assert line["shards"] == [0], line
    assert line["unreturned"] == ([0] if kind == "async" else []), line
    ended = "exiting_with_stuck_processors" if kind == "async" else "exiting_without_stuck_threads"
    assert daemon.events(ended), daemon.log_tail()
    assert daemon.events("left_group"), daemon.log_tail()

    # Everything that finished is committed: all of shard 1; shard 0 up to its stuck batch.
    checkpoints = pool.admin.checkpoints(logstore, "stuck")
    assert checkpoints[1]["checkpoint"] == end1
    assert seq_of(checkpoints[0]["checkpoint"]) == seq_of(begin0) + GROUPS_PER_PULL
    assert len((out / "shard-0.jsonl").read_text().splitlines()) == (
        GROUPS_PER_PULL * LOGS_PER_GROUP
    )
    assert len(read_ids([out])) == GROUPS_PER_PULL * LOGS_PER_GROUP + len(
        (out / "shard-1.jsonl").read_text().splitlines()
    )


def stuck_in_a_batch(pool: Pool, logstore: str, *, grace: float) -> Daemon:
    """A daemon whose (async) processor is stuck in its first batch of a one-shard logstore,
    with `shutdown_grace = grace`."""
    pool.admin.create_logstore(logstore, 1)
    pool.produce(logstore, count=100, group_size=LOGS_PER_GROUP, prefix="s").wait()
    out = pool.dir / f"out-{logstore}"
    daemon = pool.daemon(
        logstore,
        "stuck",
        logstore,
        processor="stuck",
        processor_options={"path": str(out), "kind": "async", "stuck_shard": 0, "after": 0},
        consumer={"shutdown_grace": grace},
    )
    wait_until(lambda: (out / "stuck-0").exists(), 30, daemon.log_tail)
    return daemon


@pytest.mark.parametrize("second", [signal.SIGINT, signal.SIGTERM])
def test_a_second_signal_exits_at_once(daemon_pool: Pool, second: signal.Signals) -> None:
    daemon = stuck_in_a_batch(daemon_pool, f"second-{second.name.lower()}", grace=120.0)
    daemon.signal(signal.SIGTERM)
    wait_until(lambda: bool(daemon.events("shutdown_started")), 10, daemon.log_tail)
    time.sleep(SAME_STOP_S)  # sooner, it would be taken for the same stop sent twice
    started = time.monotonic()
    daemon.signal(second)
    code = daemon.wait(10)
    took = time.monotonic() - started
    print(f"second {second.name}: exit {code} after {took:.2f} s")
    assert code == 1, daemon.log_tail()
    assert took < 3.0, took
    (line,) = daemon.events("second_signal_exiting_now")
    assert line["signal"] == second.name


def test_the_same_stop_sent_twice_at_once_is_one_graceful_stop(daemon_pool: Pool) -> None:
    """systemd (KillMode=control-group) and a `--workers` supervisor each send a worker
    SIGTERM: two within milliseconds are one stop, whose shutdown runs its course (here its 3 s
    grace, held by a stuck batch), not an operator's second signal that ends it at once."""
    daemon = stuck_in_a_batch(daemon_pool, "twice-at-once", grace=3.0)
    daemon.signal(signal.SIGTERM)
    # The second copy 0.2 s later: by then the daemon took the first (its handlers switched
    # within milliseconds), and it came well within SAME_STOP_S of it, however slow the
    # machine. (tests/unit/test_signal_logging.py times both cases exactly.)
    time.sleep(0.2)
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 1, daemon.log_tail()  # the stuck batch's exit code
    assert daemon.events("shutdown_stuck_shards"), daemon.log_tail()
    assert not daemon.events("second_signal_exiting_now"), daemon.log_tail()


def test_a_coroutine_that_blocks_the_event_loop_is_named(daemon_pool: Pool) -> None:
    """An `async def process` calling `time.sleep` stops heartbeats, commits and the ops port
    at once; the daemon cannot prevent it, but it says so, and where: the plugin's own line
    (found by a plugin author's audit, who saw only lease and heartbeat symptoms)."""
    pool = daemon_pool
    logstore = "blocking"
    pool.admin.create_logstore(logstore, 1)
    pool.produce(logstore, count=200, group_size=LOGS_PER_GROUP, prefix="b").wait()
    out = pool.dir / "out-blocking"
    daemon = pool.daemon(
        logstore,
        "blocking",
        "blocking",
        processor="stuck",
        processor_options={
            "path": str(out), "kind": "blocking", "stuck_shard": 0, "after": 0, "block_s": 5.0,
        },
        consumer={"max_fetch_log_groups": GROUPS_PER_PULL},
    )  # fmt: skip
    wait_until(lambda: daemon.events("event_loop_unblocked"), 30, daemon.log_tail)
    (blocked,) = daemon.events("event_loop_blocked")
    assert "harness_processors.py" in blocked["where"], blocked
    assert "in process" in blocked["where"], blocked
    assert "plain def" in blocked["hint"], blocked
    (unblocked,) = daemon.events("event_loop_unblocked")
    assert 4.5 <= unblocked["blocked_s"] <= 15.0, unblocked  # 5 s asleep, plus load
    # /readyz names the cause beside the heartbeat trouble it caused, for a minute
    status, body = daemon.readiness()
    assert status == 503, body
    assert body["reasons"][0].startswith("the event loop was blocked for "), body
    assert "harness_processors.py" in body["reasons"][0], body
    assert daemon.stop() == 0, daemon.log_tail()
