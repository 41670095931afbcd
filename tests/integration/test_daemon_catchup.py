"""A shard that catches up with the end of its backlog commits at once (issue #14, item 4).

`checkpoint_interval` is 60 s here and the `null` processor only saves with
`persist=False`, so before this change the first commit came a whole interval after the
data was read. Now each shard's end position is committed as soon as the batches that
reach it are done, once per catch-up: polls while caught up commit nothing more.
"""

from __future__ import annotations

import time

import pytest

from loghubd.protocol import errors as E
from tests.integration.daemon_harness import Pool, wait_until

pytestmark = pytest.mark.slow

SHARDS = 2


def test_catching_up_commits_the_end_at_once_and_only_once(daemon_pool: Pool) -> None:
    pool = daemon_pool
    pool.admin.create_logstore("catchup", SHARDS)
    # More than one pull per shard: 1,000 groups of 5 logs, pulls of at most 100 groups.
    pool.produce("catchup", count=5_000, group_size=5, prefix="c").wait()
    ends = {s: pool.admin.cursor("catchup", s, "end") for s in range(SHARDS)}
    started = time.monotonic()
    daemon = pool.daemon(
        "catchup",
        "cu",
        "cu",
        processor="null",
        consumer={"checkpoint_interval": 60.0, "max_fetch_log_groups": 100},
    )

    def at_end() -> bool:
        try:
            checkpoints = pool.admin.checkpoints("catchup", "cu")
        except E.ConsumerGroupNotExist:
            return False
        return {s: cp["checkpoint"] for s, cp in checkpoints.items()} == ends

    wait_until(at_end, 30, lambda: f"not committed to the end:\n{daemon.log_tail()}", 0.05)
    took = time.monotonic() - started
    print(f"start to both shards committed at their end: {took:.2f} s")
    assert took < 30  # well inside the 60 s checkpoint interval

    commits = daemon.metric("loghubd_checkpoint_commits_total", result="ok")
    assert commits == SHARDS  # one per shard: its catch-up
    time.sleep(1.5)  # ~30 empty polls per shard at fetch_interval 0.05 s
    assert daemon.metric("loghubd_checkpoint_commits_total", result="ok") == commits
    assert daemon.stop() == 0, daemon.log_tail()
