"""The `spark` processor: registration, the per-daemon factory and the per-shard processor.

The factory owns the engine (one SparkSession, one buffer, one write-ahead log per daemon):
`bind(context)` receives where the daemon consumes from (needed to re-read a crashed write's
ranges), `start()` brings Spark up, warms it up and recovers, `close()` stops it. Processors
are thin: `process` buffers the batch with a deferred ack and writes when a threshold is
reached; `redelivery` passes on the engine's request to re-read a batch that failed outside
its own `process` (`loghubd.Redeliverable`); `shutdown` writes what is buffered before the
shard is let go.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from loghubd import Batch, CliCommand, ProcessorContext, ProcessorSpec, Tracker, hookimpl
from loghubd_spark.options import NAME, SparkOptions


class SparkProcessor:
    def __init__(self, factory: SparkFactory, shard: int) -> None:
        self.factory = factory
        self.shard = shard

    def initialize(self, shard: int) -> None:
        self.factory.engine  # noqa: B018 - fails clearly if the factory was never started

    def process(self, batch: Batch, tracker: Tracker) -> str | None:
        """Buffer; write when due. A batch written alone (a write holding it with others
        failed) is written here, so its own failure reaches the daemon's failure policy. The
        result is a rollback cursor when one of this shard's buffered batches failed outside
        its own `process()` and must be delivered again."""
        engine = self.factory.engine
        key = (batch.shard, batch.cursor)
        engine.add(batch, tracker.defer())
        if engine.due(key):
            engine.flush("size", own=key)
        rollback: str | None = engine.take_rollback(self.shard)
        return rollback

    def redelivery(self) -> str | None:
        """The same request as `process` returns, asked while the shard waits for data: a
        quiet shard's batch whose timer write failed is re-delivered without waiting for new
        logs, so its own failure meets the failure policy and its checkpoint can move."""
        rollback: str | None = self.factory.engine.take_rollback(self.shard)
        return rollback

    def shutdown(self, tracker: Tracker) -> None:
        self.factory.engine.shutdown_shard(self.shard)


class SparkFactory:
    def __init__(self, options: Mapping[str, Any]) -> None:
        self.options = SparkOptions.parse(options)
        self.context: ProcessorContext | None = None
        self._engine: Any = None

    @property
    def engine(self) -> Any:
        if self._engine is None:
            raise RuntimeError("the spark processor's factory was not started")
        return self._engine

    def bind(self, context: ProcessorContext) -> None:
        self.context = context

    def start(self) -> None:
        # Heavy imports (pyspark, pyarrow) only when the processor really runs.
        from loghubd_spark.engine import Engine
        from loghubd_spark.runner import SparkRunner

        runner = SparkRunner(self.options.master, self.options.conf)
        engine = Engine(self.options, runner, context=self.context)
        try:
            engine.start()
        except BaseException:
            engine.close()  # conversion children, the session
            raise
        self._engine = engine

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()

    def __call__(self, shard: int) -> SparkProcessor:
        return SparkProcessor(self, shard)


@hookimpl
def loghubd_register_processors() -> Iterable[ProcessorSpec]:
    return [
        ProcessorSpec(
            NAME,
            SparkFactory,
            "Arrow micro-batches through a PySpark pipeline to Parquet/JSON lines, exactly once",
            {
                "master": "Spark master URL (local[*])",
                "conf": "Spark configuration (table of strings)",
                "sql": "Spark SQL reading the batch as {logs} (or function)",
                "function": "module:callable taking the batch's DataFrame (or sql)",
                "sink": "parquet or jsonl (parquet)",
                "path": "output directory or Spark file system URI (required)",
                "wal_dir": "local write-ahead log directory; required for a URI path",
                "max_rows": "rows buffered before a write (100000)",
                "max_bytes": "Arrow bytes buffered before a write (64 MiB)",
                "max_delay": "seconds a row waits at most before a write (10.0)",
                "write_timeout": "seconds a Spark write may take (600.0)",
                "shutdown_budget": "seconds for the last write at a stop (25.0, at most 25)",
                "convert_processes": "Arrow conversion child processes (one per spare core, 1-4)",
            },
        )
    ]


@hookimpl
def loghubd_cli_commands() -> Iterable[CliCommand]:
    from loghubd_spark.cli import SPARK_ARCHIVE, SPARK_STREAM

    return [SPARK_STREAM, SPARK_ARCHIVE]
