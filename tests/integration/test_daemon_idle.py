"""A quiet shard is polled less and less, up to `idle_fetch_interval`, and its next logs are
still read: nothing lost, nothing twice (loghubd.consumer.pacing).

The harness's daemons keep `idle_fetch_interval` at `fetch_interval` (0.05 s: a pull every
0.05 s, as every other test expects). This one lets the pause grow to 1 s and counts the pulls
the daemon makes while nothing arrives: about one per shard per second, where the fixed pace
would make about twenty. A loaded machine can only make fewer pulls, so the upper bound does
not depend on its speed.
"""

from __future__ import annotations

import time

import pytest

from tests.integration.daemon_harness import Pool, delivery_report, read_records, wait_until

pytestmark = pytest.mark.slow

SHARDS = 2
WINDOW_S = 4.0


def test_a_quiet_shard_is_polled_once_per_idle_interval_and_its_next_logs_arrive(
    daemon_pool: Pool,
) -> None:
    pool = daemon_pool
    pool.admin.create_logstore("quiet", SHARDS)
    daemon = pool.daemon(
        "quiet",
        "quiet-group",
        "quiet",
        consumer={"fetch_interval": 0.05, "idle_fetch_interval": 1.0},
    ).wait_ready()

    def pulls() -> float:
        return daemon.metric("loghubd_fetch_duration_seconds_count")

    wait_until(lambda: pulls() >= 6 * SHARDS, 20, "no pulls")  # 0.05, 0.1, ... 0.8, 1.0 s
    before = pulls()
    time.sleep(WINDOW_S)
    made = pulls() - before
    # ~1 per shard per second; 0.05 s apart they would have been ~80 per shard.
    assert 1 <= made <= 2 * SHARDS * (WINDOW_S + 1), f"{made} pulls in {WINDOW_S} s"

    producer = pool.produce("quiet", count=300, group_size=10, prefix="q")
    producer.wait()
    wait_until(
        lambda: pool.committed_to_end("quiet", "quiet-group", SHARDS),
        30,
        lambda: f"not consumed:\n{daemon.log_tail()}",
    )
    assert daemon.stop() == 0, daemon.log_tail()
    delivered = [record["id"] for _, record in read_records([daemon.output])]
    report = delivery_report(producer.ids, delivered)
    assert report == {"missing": [], "duplicated": {}, "unexpected": []}, report
