"""The daemon console's history of status samples (pure)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from loghubd.console.daemon_data import POINTS, History, consumed_by_shard
from loghubd.ops.metrics import Metrics, labelled_by_source


def status(reason: str = "", error: str = "", lag: float = 0.0) -> dict[str, Any]:
    return {
        "sources": [
            {
                "name": "a",
                "error": error,
                "shards": [{"shard": 0, "reason": reason, "lag_seconds": lag}],
            }
        ]
    }


def test_throughput_is_logs_per_second_between_samples_and_a_reset_counts_nothing() -> None:
    h = History()
    for t, consumed in [(0, 0.0), (2, 100.0), (4, 300.0), (6, 50.0), (8, 150.0)]:
        h.record(t, status(lag=t / 2), {("a", 0): consumed})
    assert h.throughput(("a", 0)) == [50.0, 100.0, 0.0, 50.0]
    assert h.lag(("a", 0)) == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert h.span(("a", 0)) == 8
    assert h.throughput(("a", 9)) == [] and h.lag(("b", 0)) == []


def test_series_are_thinned_to_a_few_points_ending_with_the_newest() -> None:
    h = History(keep=90)
    for t in range(200):
        h.record(t, status(lag=float(t)), {("a", 0): float(t)})
    lag = h.lag(("a", 0))
    assert len(lag) <= POINTS and lag[-1] == 199.0
    assert lag == sorted(lag)


def test_errors_are_noted_when_they_appear_or_change_with_their_time() -> None:
    h = History()
    h.record(1, status(), {})
    h.record(2, status(reason="boom"), {})
    h.record(3, status(reason="boom"), {})  # the same error again: not a new entry
    h.record(4, status(reason=""), {})
    h.record(5, status(reason="boom", error="cannot start"), {})
    errors = [(e.when, e.shard, e.text) for e in h.errors()]
    assert [when for when, _s, _t in errors] == [5, 5, 2]  # newest first
    assert sorted(errors) == [(2, 0, "boom"), (5, -1, "cannot start"), (5, 0, "boom")]


def test_consumed_logs_are_read_per_source_and_shard_from_the_ops_registry() -> None:
    a, b = Metrics(CollectorRegistry()), Metrics(CollectorRegistry())
    a.consumed_logs.labels(shard="0").inc(10)
    a.consumed_logs.labels(shard="3").inc(5)
    b.consumed_logs.labels(shard="0").inc(7)
    ops = labelled_by_source([("a", a.registry), ("b", b.registry)])
    assert consumed_by_shard(list(ops.collect())) == {("a", 0): 10, ("a", 3): 5, ("b", 0): 7}
