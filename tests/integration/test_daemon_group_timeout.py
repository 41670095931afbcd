"""Another consumer shortens the group's timeout under a running daemon: the daemon follows it.

The official SDK's `ConsumerWorker` rewrites the group's timeout to 2 x its own
`heartbeat_interval` whenever it starts, on a group that exists too (found by the migration
audit: an SDK worker with `heartbeat_interval = 2` joining a group of daemons beating every
5 s had them expired between two heartbeats, over and over, each time delivering again what
they had not committed yet). Here the SDK's own `update_consumer_group` does what such a
worker does, against a real `loghubd serve`, with a real daemon consuming.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from aliyun.log import LogClient

from loghubd.testing.process import ServerProcess
from tests.integration.daemon_harness import (
    PROJECT,
    Pool,
    delivery_report,
    read_records,
    wait_until,
)

pytestmark = pytest.mark.slow

LOGSTORE, GROUP, SHARDS = "shortened", "mixed", 2
SDK_HEARTBEAT = 1  # the SDK worker's heartbeat_interval: it sets the timeout to 2 s
QUIET_S = 6.0  # three of the new timeouts: a daemon still beating every 3 s is expired twice


def test_a_daemon_follows_a_group_timeout_shortened_by_an_sdk_worker(
    loghubd_server: ServerProcess,
    daemon_pool: Pool,
    sdk_via_proxy: Callable[[ServerProcess], str],
) -> None:
    pool = daemon_pool
    pool.admin.create_logstore(LOGSTORE, SHARDS)
    daemon = pool.daemon(
        LOGSTORE, GROUP, "daemon", consumer={"heartbeat_interval": 3.0, "timeout": 9.0}
    ).wait_ready()
    first = pool.produce(LOGSTORE, count=400, group_size=10, prefix="a")
    first.wait()
    wait_until(
        lambda: pool.committed_to_end(LOGSTORE, GROUP, SHARDS),
        30,
        lambda: f"not consumed:\n{daemon.log_tail()}",
    )

    # After the daemon started: HTTP_PROXY must not reach it.
    sdk = LogClient(sdk_via_proxy(loghubd_server), "any-key-id", "any-secret")
    sdk.update_consumer_group(PROJECT, LOGSTORE, GROUP, timeout=2 * SDK_HEARTBEAT)

    wait_until(
        lambda: daemon.events("consumer_group_timeout_changed"),
        40,  # at the latest the periodic read (30 s); a rejoin reads it at once
        lambda: f"the daemon did not see the new timeout:\n{daemon.log_tail()}",
    )
    changed = daemon.events("consumer_group_timeout_changed")[0]
    assert (changed["timeout_was"], changed["timeout"]) == (9.0, 2.0), changed
    heartbeat = daemon.source_status("default")["heartbeat"]
    assert heartbeat["interval"] == pytest.approx(2 / 3, abs=1e-3), heartbeat
    assert heartbeat["timeout"] == 2.0, heartbeat

    # From now on it keeps its shards: no more expiries while it beats every 2/3 s.
    rejoins = len(daemon.events("heartbeat_rejoin"))
    second = pool.produce(LOGSTORE, count=400, group_size=10, prefix="b")
    second.wait()
    time.sleep(QUIET_S)
    wait_until(
        lambda: pool.committed_to_end(LOGSTORE, GROUP, SHARDS),
        30,
        lambda: f"not consumed:\n{daemon.log_tail()}",
    )
    assert len(daemon.events("heartbeat_rejoin")) == rejoins, daemon.log_tail()
    assert daemon.held() == frozenset(range(SHARDS))

    # Shards the server took from it on an expiry are counted as lost: gained - lost = held.
    gained = daemon.metric("loghubd_rebalance_shards_total", direction="gained")
    lost = daemon.metric("loghubd_rebalance_shards_total", direction="lost")
    assert gained - lost == SHARDS, (gained, lost)
    assert lost == SHARDS * rejoins, (lost, rejoins)

    assert daemon.stop() == 0, daemon.log_tail()
    delivered = [record["id"] for _, record in read_records([daemon.output])]
    # Everything was committed before the timeout changed, so an expiry had nothing to
    # deliver again.
    report = delivery_report(first.ids + second.ids, delivered)
    assert report == {"missing": [], "duplicated": {}, "unexpected": []}, report
