"""The `spark` processor's own series, on the source's registry (the daemon serves them on
`/metrics` with the source's label; docs/metrics.md lists the core's and the built-in
sinks'). A write that fails is retried as it is (by the next batch, the timer or shutdown), so
without these a failing pipeline would show only as a stalled checkpoint."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_SECONDS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class SparkMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = self.registry = registry
        self.rows = Counter(
            "loghubd_spark_written_rows_total",
            "Rows of committed writes (the pipeline's input rows)",
            registry=r,
        )
        self.writes = Counter(
            "loghubd_spark_writes_total", "Writes committed in the write-ahead log", registry=r
        )
        self.seconds = Histogram(
            "loghubd_spark_write_duration_seconds",
            "One committed write: the Spark job (pipeline and sink), then the commit",
            buckets=_SECONDS,
            registry=r,
        )
        self.failures = Counter(
            "loghubd_spark_write_failures_total",
            "Write attempts that failed (each is retried as it is)",
            registry=r,
        )
        self.buffered = Gauge(  # its function is set by the engine made last
            "loghubd_spark_buffered_rows",
            "Rows buffered for the next write (max_rows bounds it)",
            registry=r,
        )
