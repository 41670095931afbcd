"""What a daemon says while the service is gone and once it is back (on-call audit): the lag
is "unknown", not the "caught up, 0" it measured last (a partition froze /status and the lag
gauges at that while logs piled up), a shard held past the lease says so in its state, and
each fault's end is logged once
(`pull_recovered`, `heartbeat_recovered`), so a journal's last line is not a fault that is
long over. A real `loghubd serve`, stopped and started again on the same port and data, and
a real daemon."""

from __future__ import annotations

import math

from loghubd.testing.process import ServerProcess
from tests.integration.daemon_harness import (
    Daemon,
    Pool,
    delivery_report,
    expected_ids,
    short,
    wait_until,
)
from tests.integration.harness_output import read_ids
from tests.reliability.faultproxy import FaultProxy


def shard0(daemon_status: dict[str, object]) -> dict[str, object]:
    shards = daemon_status["shards"]
    assert isinstance(shards, list)
    return dict(shards[0])


def pulls_failing(d: Daemon) -> dict[str, object] | None:
    s = shard0(d.status())
    return s if s["pull_failing_for_s"] is not None else None


def test_lag_is_unknown_while_pulls_fail_and_each_fault_says_when_it_ended(
    loghubd_server: ServerProcess, daemon_pool: Pool
) -> None:
    pool = daemon_pool
    pool.admin.create_logstore("outage", 1)
    pool.produce("outage", count=200, group_size=20, prefix="a").wait()
    d = pool.daemon("outage", "outage", "o").wait_ready()
    wait_until(lambda: pool.committed_to_end("outage", "outage", 1), 30, d.log_tail)
    wait_until(lambda: shard0(d.status())["behind"] == "caught up", 10, d.log_tail)

    loghubd_server.stop()  # connections refused: every pull and heartbeat fails at once

    during = wait_until(lambda: pulls_failing(d), 20, d.log_tail)
    assert during["caught_up"] is False, during
    assert str(during["behind"]).startswith("unknown: pulls failing for "), during
    assert "connection refused" in str(during["behind"]), during
    assert during["lag_log_groups"] is None and during["lag_seconds"] is None, during
    assert math.isnan(d.metric("loghubd_lag_logs")), d.metrics()
    assert math.isnan(d.metric("loghubd_lag_seconds")), d.metrics()
    wait_until(lambda: d.events("heartbeat_failed"), 20, d.log_tail)
    assert not d.events("pull_recovered") and not d.events("heartbeat_recovered")

    # Past the group's timeout the lease has expired: the shard is not "consuming" any more.
    def lease_expired() -> dict[str, object] | None:
        s = shard0(d.status())
        return s if s["state"] == "lease_expired" else None

    expired = wait_until(lease_expired, 20, d.log_tail)
    assert str(expired["reason"]).startswith("lease expired: "), expired
    assert d.status()["heartbeat"]["lease_expired"] is True
    assert str(expired["behind"]).startswith("unknown: pulls failing for "), expired

    loghubd_server.start()  # same port, same data
    pool.produce("outage", count=100, group_size=20, prefix="b").wait()
    wait_until(lambda: pool.committed_to_end("outage", "outage", 1), 30, d.log_tail)
    wait_until(lambda: shard0(d.status())["behind"] == "caught up", 10, d.log_tail)
    after = shard0(d.status())
    assert after["pull_failing_for_s"] is None and after["caught_up"] is True, after
    assert (after["state"], after["reason"]) == ("consuming", ""), after
    wait_until(lambda: d.metric("loghubd_lag_logs") == 0, 10, d.metrics)  # measured again

    [pulled] = d.events("pull_recovered")
    assert pulled["shard"] == 0 and pulled["failures"] >= 1 and pulled["failing_for_s"] > 0
    # the heartbeat's next beat may come after the pulls' (its interval, after back-off)
    wait_until(lambda: d.events("heartbeat_recovered"), 30, d.log_tail)
    [beat] = d.events("heartbeat_recovered")
    assert beat["failures"] >= 1, beat
    assert d.stop() == 0, d.log_tail()
    report = delivery_report(expected_ids("a", 200) + expected_ids("b", 100), read_ids([d.output]))
    assert not report["missing"] and not report["duplicated"], short(report)


def test_a_partition_that_holds_the_connections_reads_unknown_then_says_it_is_over(
    daemon_pool: Pool,
) -> None:
    """The audit's partition: the service runs (and is written to) but the daemon's traffic
    is held, not refused, so each call ends at its deadline. The lag reads unknown while logs
    pile up behind it, and each fault's end is said once when the traffic flows again. The
    group's timeout is long enough that the service keeps the shard ours throughout."""
    pool = daemon_pool
    pool.admin.create_logstore("held", 1)
    pool.produce("held", count=100, group_size=10, prefix="a").wait()
    with FaultProxy(int(pool.endpoint.rpartition(":")[2])) as proxy:
        d = pool.daemon("held", "held", "h", start=False, consumer={"timeout": 12.0})
        d.config["source"]["endpoint"] = proxy.endpoint
        d.start().wait_ready()
        wait_until(lambda: shard0(d.status())["behind"] == "caught up", 30, d.log_tail)

        proxy.blackhole(True)
        pool.produce("held", count=100, group_size=10, prefix="b").wait()  # piles up meanwhile
        during = wait_until(lambda: pulls_failing(d), 20, d.log_tail)
        assert during["caught_up"] is False and during["state"] == "consuming", during
        assert str(during["behind"]).startswith("unknown: pulls failing for "), during
        assert math.isnan(d.metric("loghubd_lag_logs")), d.metrics()
        wait_until(lambda: d.events("heartbeat_failed"), 10, d.log_tail)

        proxy.blackhole(False)
        wait_until(lambda: pool.committed_to_end("held", "held", 1), 30, d.log_tail)
        wait_until(lambda: shard0(d.status())["behind"] == "caught up", 10, d.log_tail)
        wait_until(lambda: d.events("heartbeat_recovered"), 20, d.log_tail)
        assert not d.events("heartbeat_rejoin"), d.log_tail()  # the shard stayed ours
        [pulled] = d.events("pull_recovered")
        [beat] = d.events("heartbeat_recovered")
        assert pulled["failures"] == len(d.events("pull_failed")), d.log_tail()
        assert beat["failures"] == len(d.events("heartbeat_failed")), d.log_tail()
        wait_until(lambda: d.metric("loghubd_lag_logs") == 0, 10, d.metrics)  # measured again
        assert d.stop() == 0, d.log_tail()
    report = delivery_report(expected_ids("a", 100) + expected_ids("b", 100), read_ids([d.output]))
    assert not report["missing"] and not report["duplicated"], short(report)
