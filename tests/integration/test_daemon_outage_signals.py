"""What a daemon says while the service is gone and once it is back (on-call audit): the lag
is "unknown", not the "caught up, 0" it measured last (a partition froze /status and the lag
gauges at that while logs piled up), and each fault's end is logged once
(`pull_recovered`, `heartbeat_recovered`), so a journal's last line is not a fault that is
long over. A real `loghubd serve`, stopped and started again on the same port and data, and
a real daemon."""

from __future__ import annotations

import math

from loghubd.testing.process import ServerProcess
from tests.integration.daemon_harness import (
    Pool,
    delivery_report,
    expected_ids,
    short,
    wait_until,
)
from tests.integration.harness_output import read_ids


def shard0(daemon_status: dict[str, object]) -> dict[str, object]:
    shards = daemon_status["shards"]
    assert isinstance(shards, list)
    return dict(shards[0])


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

    def unknown() -> dict[str, object] | None:
        s = shard0(d.status())
        return s if s["pull_failing_for_s"] is not None else None

    during = wait_until(unknown, 20, d.log_tail)
    assert during["caught_up"] is False, during
    assert str(during["behind"]).startswith("unknown: pulls failing for "), during
    assert "connection refused" in str(during["behind"]), during
    assert during["lag_log_groups"] is None and during["lag_seconds"] is None, during
    assert math.isnan(d.metric("loghubd_lag_logs")), d.metrics()
    assert math.isnan(d.metric("loghubd_lag_seconds")), d.metrics()
    wait_until(lambda: d.events("heartbeat_failed"), 20, d.log_tail)
    assert not d.events("pull_recovered") and not d.events("heartbeat_recovered")

    loghubd_server.start()  # same port, same data
    pool.produce("outage", count=100, group_size=20, prefix="b").wait()
    wait_until(lambda: pool.committed_to_end("outage", "outage", 1), 30, d.log_tail)
    wait_until(lambda: shard0(d.status())["behind"] == "caught up", 10, d.log_tail)
    after = shard0(d.status())
    assert after["pull_failing_for_s"] is None and after["caught_up"] is True, after
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
