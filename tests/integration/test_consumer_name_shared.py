"""Two real daemons given one consumer name: the service sees one consumer, both consume every
shard, and each daemon finds out from the checkpoints that move under its name without it
(loghubd.consumer.twins): `/readyz` says so, `consumer_name_shared` is logged, and
`loghubd_checkpoints_moved_by_others_total{by="same_name"}` counts it.

The daemons reach the server through a proxy that answers the checkpoint read (GetCheckPoint)
`READ_DELAY_S` late, as a distant endpoint does. The audit used to run on a timer of its own,
`3 x checkpoint_interval` (5 s here, 5 x 1 s), so every read met the daemon's own periodic
commit: a commit sent while the read was out made the read worthless, and a daemon whose
commit loop woke a moment before its audit never judged a checkpoint at all (one of two
daemons never noticed). Now the read is taken just before the commit tick's
commits, so each daemon must say so within a few audits of both holding the shards.

The other side, no false alarm under rebalances and crashes, is checked where daemons come and
go anyway (test_daemon_group.py: every daemon's `same_name` count stays 0).
"""

from __future__ import annotations

import time

import pytest

from loghubd.testing import ServerProcess
from tests.integration.daemon_harness import Daemon, Pool, wait_until
from tests.integration.recording_proxy import RecordingProxy

pytestmark = pytest.mark.slow

LOGSTORE = "shared-name"
GROUP = "pair"
SHARDS = 2
READ_DELAY_S = 0.3  # the checkpoint read's extra latency (commits and heartbeats get none)
AUDIT_S = 5.0  # `twins.audit_interval` at the harness's 1 s checkpoint interval
AUDITS = 4  # each judges at its first audit once both commit; room for a loaded machine


def slow_checkpoint_reads(path: str, query: dict[str, str]) -> dict[str, str]:
    # In the proxy's handler thread: other requests go on meanwhile.
    if path == f"/logstores/{LOGSTORE}/consumergroups/{GROUP}" and "type" not in query:
        time.sleep(READ_DELAY_S)
    return query


def flagged(daemon: Daemon) -> bool:
    code, body = daemon.readiness()
    reasons = " ".join(body.get("reasons", []))
    return code == 503 and "another process consumes as consumer 'twin'" in reasons


def test_two_daemons_under_one_consumer_name_each_say_so(
    daemon_pool: Pool, loghubd_server: ServerProcess
) -> None:
    pool = daemon_pool
    pool.admin.create_logstore(LOGSTORE, SHARDS)
    producer = pool.produce(LOGSTORE, count=60_000, rate=1_500, group_size=20, prefix="s")
    with RecordingProxy(loghubd_server.port, rewrite_query=slow_checkpoint_reads) as proxy:
        twins = []
        for name in ("first", "second"):
            daemon = Daemon(
                pool.dir / f"daemon-{name}",
                proxy.endpoint,
                LOGSTORE,
                GROUP,
                name,
                consumer={"name": "twin"},
            )
            pool.daemons.append(daemon)  # killed at teardown
            twins.append(daemon.start().wait_ready())
        first, second = twins
        # One consumer to the service: both hold both shards.
        wait_until(
            lambda: first.held() == second.held() == frozenset(range(SHARDS)),
            20,
            lambda: f"holdings {first.held()} / {second.held()}",
        )
        both_hold = time.monotonic()
        for daemon in (first, second):
            # Both daemons' audits run meanwhile: the second's wait is what is left of its own.
            wait_until(
                lambda daemon=daemon: flagged(daemon),  # type: ignore[misc]
                max(1.0, both_hold + AUDITS * AUDIT_S + 5.0 - time.monotonic()),
                lambda daemon=daemon: (  # type: ignore[misc]
                    f"{daemon.name} did not say so within {AUDITS} audits: {daemon.readiness()}\n"
                    f"{daemon.log_tail()}"
                ),
                interval=0.25,
            )
            assert daemon.metric("loghubd_checkpoints_moved_by_others_total", by="same_name") >= 1
            events = daemon.events("consumer_name_shared")
            assert events and events[0]["consumer"] == "twin", daemon.log_tail()
            assert set(events[0]["shards"]) <= set(range(SHARDS)), events
            status = daemon.source_status("default")
            assert status["consumer_name_shared"]["shards"], status
        producer.stop()
