"""A daemon paused (SIGSTOP) past the group timeout while another one runs.

The other daemon takes the paused one's shards. After SIGCONT the paused daemon must not
move the new owner's checkpoints (they are fenced, and it holds batches unprocessed while
its lease is stale, until the service says it was expired) and must stop writing output for
the shards it lost. It may legitimately get shards
back by rebalancing later: its output for a shard may only grow while the server says it
owns that shard.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from typing import Any

import pytest

from loghubd.protocol import cursor as cursors
from tests.integration.daemon_harness import (
    HEARTBEAT,
    TIMEOUT,
    LineCounter,
    Pool,
    counts,
    delivery_report,
    holdings,
    read_records,
    short,
    wait_until,
)

pytestmark = pytest.mark.slow

LOGSTORE = "paused"
GROUP = "pausers"
SHARDS = 4
ALL = frozenset(range(SHARDS))


def test_paused_daemon_loses_its_shards_and_does_not_touch_them_after_resume(
    daemon_pool: Pool,
) -> None:
    pool = daemon_pool
    pool.admin.create_logstore(LOGSTORE, SHARDS)
    sleeper = pool.daemon(LOGSTORE, GROUP, "sleeper").wait_ready()
    steady = pool.daemon(LOGSTORE, GROUP, "steady").wait_ready()
    daemons = [sleeper, steady]
    wait_until(lambda: counts(holdings(daemons)) == [2, 2], 3 * HEARTBEAT + 1)
    producer = pool.produce(LOGSTORE, count=140_000, rate=10_000, group_size=100, prefix="p")
    lines = LineCounter(d.output for d in daemons)
    wait_until(lambda: lines.count() >= 10_000, 30, "consumption did not start")

    polls: list[tuple[float, dict[int, dict[str, Any]]]] = []

    def poll() -> dict[int, dict[str, Any]]:
        shards = {s["shard"]: s for s in pool.admin.group_status(LOGSTORE, GROUP)["shards"]}
        polls.append((time.monotonic(), shards))
        return shards

    lost = sleeper.held()
    sleeper.signal(signal.SIGSTOP)
    stopped = time.monotonic()
    wait_until(
        lambda: all(poll()[s]["owner"] == "steady" for s in ALL) and steady.held() == ALL,
        TIMEOUT + HEARTBEAT + 1.5,
        lambda: f"steady holds {steady.held()}; server: {polls[-1][1]}",
        interval=0.1,
    )
    took_over = time.monotonic() - stopped
    # The new owner commits the lost shards (its name on their checkpoints).
    wait_until(
        lambda: all(poll()[s]["checkpointConsumer"] == "steady" for s in lost),
        2 * HEARTBEAT + 1,
        lambda: f"server: {polls[-1][1]}",
        interval=0.1,
    )
    # Paused for longer than the group timeout (so also the sleeper's own lease is stale).
    time.sleep(max(0.0, stopped + TIMEOUT + 0.5 - time.monotonic()))

    sleeper.signal(signal.SIGCONT)
    resumed = time.monotonic()
    sleeper_lines = LineCounter([sleeper.output])
    sleeper_lines.count()
    baseline: dict[int, int] | None = None
    growth_violations: list[str] = []
    # Watch until the logs are written and a few heartbeats more (enough for the resumed
    # daemon to rejoin and possibly get shards back through the hand-over).
    while producer.running() or time.monotonic() < resumed + 6 * HEARTBEAT:
        sizes = sleeper_lines.per_shard()
        shards = poll()  # read after the sizes: growth seen above happened before this
        if baseline is None:
            if time.monotonic() >= resumed + 2 * HEARTBEAT:
                baseline = sizes
        else:
            for s, n in sizes.items():
                if n > baseline.get(s, 0) and shards[s]["owner"] != "sleeper":
                    growth_violations.append(
                        f"{time.monotonic() - resumed:.2f}s after SIGCONT sleeper wrote "
                        f"{n - baseline.get(s, 0)} logs of shard {s} owned by "
                        f"{shards[s]['owner']!r}"
                    )
            baseline = sizes
        time.sleep(0.1)
    producer.wait()
    assert sleeper.alive(), sleeper.log_tail()

    def committed() -> bool:
        shards = poll()
        return all(
            shards[s]["checkpoint"]
            and cursors.to_seq(s, shards[s]["checkpoint"]) == shards[s]["endCursorSeq"]
            for s in ALL
        )

    wait_until(committed, 30, lambda: f"server: {polls[-1][1]}", interval=0.2)
    for d in daemons:
        assert d.stop() == 0, d.log_tail()

    assert not growth_violations, short(growth_violations)
    # Checkpoints never went backwards, and after the resume the sleeper's name appears on
    # a checkpoint only for a shard the server had handed back to it.
    for s in ALL:
        seqs = [cursors.to_seq(s, p[s]["checkpoint"]) for _t, p in polls if p[s]["checkpoint"]]
        assert seqs == sorted(seqs), f"shard {s} checkpoint went backwards: {short(seqs, 40)}"
    owned_again: set[int] = set()
    for t, p in polls:
        for s in ALL:
            if p[s]["owner"] == "sleeper" and t > resumed:
                owned_again.add(s)
            if t > resumed and p[s]["checkpointConsumer"] == "sleeper":
                assert s in owned_again, (
                    f"{t - resumed:.2f}s after SIGCONT the sleeper committed shard {s}, "
                    f"owned by {p[s]['owner']!r}"
                )

    records = read_records(d.output for d in daemons)
    report = delivery_report(producer.ids, (r["id"] for _s, r in records))
    assert not report["missing"], short(report["missing"])
    assert not report["unexpected"], short(report["unexpected"])
    # Re-delivered: only what the sleeper had not committed when it was paused.
    dup_shards = Counter(s for s, r in records if r["id"] in report["duplicated"])
    assert set(dup_shards) <= lost, (dict(dup_shards), sorted(lost))
    assert took_over <= TIMEOUT + HEARTBEAT + 1.5
