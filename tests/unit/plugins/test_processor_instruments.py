"""`ProcessorContext.instruments`: a processor's instrument set is made once per registry, so
a second factory bound to the same source (a restarted one, a test's) neither fails with
prometheus_client's DuplicateTimeseries nor starts counting apart."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, Counter

from loghubd import ProcessorContext
from loghubd.processors.http import HttpFactory
from loghubd.processors.parquet import ParquetFactory
from loghubd.testing import make_context


def context(registry: CollectorRegistry | None = None) -> ProcessorContext:
    return make_context(metrics_registry=registry)


class Made:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.count = Counter("loghubd_test_things_total", "things", registry=registry)


def test_made_once_per_registry() -> None:
    shared = CollectorRegistry()
    a, b = context(shared), context(shared)
    assert a.instruments(Made) is b.instruments(Made)
    a.instruments(Made).count.inc(2)
    assert shared.get_sample_value("loghubd_test_things_total") == 2
    other = context()  # a fresh registry of its own
    assert other.instruments(Made) is not a.instruments(Made)


def test_two_factories_bound_to_one_source_share_their_series(tmp_path: Path) -> None:
    shared = CollectorRegistry()
    first, second = (ParquetFactory({"path": str(tmp_path / "out")}) for _ in range(2))
    first.bind(context(shared))
    second.bind(context(shared))  # no DuplicateTimeseries
    assert first.metrics is second.metrics
    second.metrics.rows.inc(5)
    assert shared.get_sample_value("loghubd_parquet_written_rows_total") == 5
    for _ in range(2):
        HttpFactory({"url": "http://127.0.0.1:1/"}).bind(context(shared))
    assert shared.get_sample_value("loghubd_http_retries_total") == 0
