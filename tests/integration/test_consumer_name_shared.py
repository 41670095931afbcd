"""Two real daemons given one consumer name: the service sees one consumer, both consume every
shard, and each daemon finds out from the checkpoints that move under its name without it
(loghubd.consumer.twins): `/readyz` says so, `consumer_name_shared` is logged, and
`loghubd_checkpoints_moved_by_others_total{by="same_name"}` counts it.

The other side, no false alarm under rebalances and crashes, is checked where daemons come and
go anyway (test_daemon_group.py: every daemon's `same_name` count stays 0).
"""

from __future__ import annotations

import pytest

from tests.integration.daemon_harness import Daemon, Pool, wait_until

pytestmark = pytest.mark.slow

LOGSTORE = "shared-name"
GROUP = "pair"
SHARDS = 2


def flagged(daemon: Daemon) -> bool:
    code, body = daemon.readiness()
    reasons = " ".join(body.get("reasons", []))
    return code == 503 and "another process consumes as consumer 'twin'" in reasons


def test_two_daemons_under_one_consumer_name_each_say_so(daemon_pool: Pool) -> None:
    pool = daemon_pool
    pool.admin.create_logstore(LOGSTORE, SHARDS)
    producer = pool.produce(LOGSTORE, count=60_000, rate=1_500, group_size=20, prefix="s")
    first = pool.daemon(LOGSTORE, GROUP, "first", consumer={"name": "twin"}).wait_ready()
    second = pool.daemon(LOGSTORE, GROUP, "second", consumer={"name": "twin"}).wait_ready()
    # One consumer to the service: both hold both shards.
    wait_until(
        lambda: first.held() == second.held() == frozenset(range(SHARDS)),
        20,
        lambda: f"holdings {first.held()} / {second.held()}",
    )
    for daemon in (first, second):
        wait_until(
            lambda daemon=daemon: flagged(daemon),  # type: ignore[misc]
            60,
            lambda daemon=daemon: (  # type: ignore[misc]
                f"{daemon.name} does not say so: {daemon.readiness()}\n{daemon.log_tail()}"
            ),
            interval=0.5,
        )
        assert daemon.metric("loghubd_checkpoints_moved_by_others_total", by="same_name") >= 1
        events = daemon.events("consumer_name_shared")
        assert events and events[0]["consumer"] == "twin", daemon.log_tail()
        assert set(events[0]["shards"]) <= set(range(SHARDS)), events
        status = daemon.source_status("default")
        assert status["consumer_name_shared"]["shards"], status
    producer.stop()
