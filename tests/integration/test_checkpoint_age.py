"""`loghubd_checkpoint_age_seconds` on a real daemon (docs/metrics.md): a shard whose batch
keeps failing holds its checkpoint back, and its age grows well past the flush interval;
a shard consuming normally stays below it and reads 0 once everything is committed."""

from __future__ import annotations

import pytest

from tests.integration.daemon_harness import CHECKPOINT, Pool, wait_until

pytestmark = pytest.mark.slow


def test_checkpoint_age_grows_only_while_a_batch_holds_the_checkpoint_back(
    daemon_pool: Pool,
) -> None:
    pool = daemon_pool
    pool.admin.create_logstore("aging", 2)
    # 2,000 logs in groups of 100, spread over the two shards; the flaky processor fails,
    # for ever, the batch holding log a1050 (and retries it: it is never skipped)
    pool.produce("aging", count=2_000, group_size=100, prefix="a").wait()
    daemon = pool.daemon(
        "aging",
        "aging-group",
        "ager",
        processor="flaky",
        processor_options={
            "path": str(pool.dir / "out"),
            "fail_id": "a1050",
            "fail_times": 1_000_000,
            "attempts": str(pool.dir / "attempts.jsonl"),
        },
        consumer={"max_fetch_log_groups": 2, "retry_initial_backoff": 0.2},
    ).wait_ready()

    def ages() -> dict[str, float]:
        return {s: daemon.metric("loghubd_checkpoint_age_seconds", shard=s) for s in "01"}

    def stuck_and_other_caught_up() -> dict[str, float] | None:
        now = ages()
        stuck = max(now, key=lambda s: now[s])
        other = "1" if stuck == "0" else "0"
        caught_up = daemon.metric("loghubd_lag_logs", shard=other) == 0
        if now[stuck] > 5 * CHECKPOINT and caught_up and now[other] == 0:
            return now
        return None

    first = wait_until(stuck_and_other_caught_up, 60, daemon.log_tail, interval=0.5)
    stuck = max(first, key=lambda s: first[s])
    # still growing: it counts from when the position last moved, not from the last flush
    later = wait_until(
        lambda: ages()[stuck] >= first[stuck] + 2 * CHECKPOINT and ages(), 30, daemon.log_tail
    )
    assert later[stuck] >= first[stuck] + 2 * CHECKPOINT
    assert daemon.metric("loghubd_processor_errors_total", shard=stuck) > 0
