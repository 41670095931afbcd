"""`/metrics` of several sources: every series labelled with its source, families merged."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from loghubd.ops.metrics import Metrics, labelled_by_source


def test_sources_are_labels_of_one_family() -> None:
    a, b = Metrics(), Metrics()
    a.consumed_logs.labels("0").inc(3)
    b.consumed_logs.labels("0").inc(5)
    b.consumed_logs.labels("1").inc(7)
    a.held_shards.set(1)
    b.held_shards.set(2)
    text = generate_latest(labelled_by_source([("a", a.registry), ("b", b.registry)])).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    consumed = {
        (s.labels["source"], s.labels["shard"]): s.value
        for s in families["loghubd_consumed_logs"].samples
        if s.name == "loghubd_consumed_logs_total"
    }
    assert consumed == {("a", "0"): 3, ("b", "0"): 5, ("b", "1"): 7}
    held = {s.labels["source"]: s.value for s in families["loghubd_held_shards"].samples}
    assert held == {"a": 1, "b": 2}
    assert text.count("# TYPE loghubd_consumed_logs_total counter") == 1
