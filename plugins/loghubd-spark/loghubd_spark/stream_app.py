"""`loghubd spark-stream -c FILE`: a Structured Streaming pipeline from a loghubd config file.

    loghubd spark-stream -c stream.toml [--available-now] [--check]
    spark-submit --master yarn ... "$(python -m loghubd_spark.stream_app --path)" -c stream.toml

The file is loghubd's format: `[source]` (endpoint, project, logstore, credentials),
`[consumer]` (`group`: where progress is committed; `name`; `start`; `order`) and the pipeline
in `[spark_stream]`; a key missing there is taken from `[processor.spark]`, so a daemon's file
with the `spark` processor runs as a stream too (give `checkpoint_location`). The section is
parsed from the raw TOML (`stream_config`, not through `loghubd.config`); unknown keys and
wrong types are refused naming the key. Environment: `LOGHUBD_SOURCE__<KEY>`,
`LOGHUBD_CONSUMER__<KEY>`, `LOGHUBD_SPARK_STREAM__<KEY>` override the file (TOML literals when
they parse as one).

Each micro-batch goes through the pipeline (`sql` over `{logs}`, or `function`) and is written
like the `spark` processor writes: partitioned by (`dt`, `batch`) with dynamic partition
overwrite, `batch` = `<query id>-<batch id>`. Spark replays a failed micro-batch with the same
id and the same offsets, so a replay replaces exactly its own partitions: exactly once.

Credentials reach the executors inside the source's options (Spark redacts option values whose
names match `spark.redaction.regex`: `accessKeyId`, `accessKeySecret`, `securityToken`); they
are never logged (`--check` prints them masked).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from loghubd_spark.options import resolve_function

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

from loghubd_spark.stream_config import APP_NAME, StreamConfig, StreamConfigError, load

# -- Spark -------------------------------------------------------------------------------------


def under_spark_submit() -> bool:
    """Started by spark-submit (its JVM is already up and configured)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def session(cfg: StreamConfig) -> SparkSession:
    from pyspark.sql import SparkSession

    from loghubd_spark.runner import DEFAULT_CONF

    master = cfg.master or ("" if under_spark_submit() else "local[*]")
    # The executors' Python workers read the logstore (the `loghub` source), so they need
    # loghubd and this plugin. Unless told otherwise (PYSPARK_PYTHON, or spark-submit's
    # `--conf spark.pyspark.python`), they run this driver's interpreter, which has both: on
    # any master, since Spark's own default, `python3` from PATH, rarely has them (on a
    # cluster: ModuleNotFoundError: No module named 'loghubd_spark'). Cluster nodes need the
    # same interpreter at the same path (one image, or a shared venv); see the README.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder
    if master:
        builder = builder.master(master)
    for key, value in {**DEFAULT_CONF, "spark.app.name": APP_NAME, **cfg.conf}.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


class BatchWriter:
    """`foreachBatch`: the pipeline, then the processor's idempotent write of one micro-batch
    (partitions `dt=*/batch=<query id>-<batch id>` replaced as a whole)."""

    def __init__(self, sql: str | None, function: str | None, sink: str, path: str) -> None:
        from loghubd_spark.jobs import Pipeline

        fn = resolve_function(function) if function else None
        self.pipeline = Pipeline(sql=sql, function=fn)
        self.sink, self.path = sink, path
        self.tag = ""
        self._bound = threading.Event()

    def bind(self, query_id: str) -> None:
        """The query's id (kept in its checkpoint, so it survives restarts) names its writes."""
        self.tag = query_id.replace("-", "")[:12]
        self._bound.set()

    def batch_name(self, batch_id: int) -> str:
        return f"{self.tag}-{batch_id:010d}"

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        from pyspark.sql import functions as F

        from loghubd_spark.jobs import BATCH_COLUMN, DATE_COLUMN, with_partitions

        if not self._bound.wait(120):
            raise RuntimeError("the streaming query's id is not known")
        name = self.batch_name(batch_id)
        df = df.withColumn(DATE_COLUMN, F.date_format(F.col("__time__"), "yyyy-MM-dd"))
        df = df.withColumn(BATCH_COLUMN, F.lit(name))
        out, done = self.pipeline.apply(df.sparkSession, df)
        try:
            writer = (
                with_partitions(out, name)
                .write.mode("overwrite")
                .option("partitionOverwriteMode", "dynamic")
                .partitionBy(DATE_COLUMN, BATCH_COLUMN)
            )
            if self.sink == "jsonl":
                writer.json(self.path)
            else:
                writer.parquet(self.path)
        finally:
            done()


def start(
    spark: SparkSession, cfg: StreamConfig, *, available_now: bool | None = None
) -> StreamingQuery:
    """Register the source, start the query; returns it running."""
    from loghubd_spark.stream import LogHubDataSource

    spark.dataSource.register(LogHubDataSource)
    reader = spark.readStream.format("loghub")
    for key, value in cfg.source_options().items():
        reader = reader.option(key, value)
    writer = BatchWriter(cfg.sql, cfg.function, cfg.sink, cfg.path)
    stream = (
        reader.load()
        .writeStream.foreachBatch(writer)
        .option("checkpointLocation", cfg.checkpoint_location)
    )
    if cfg.available_now if available_now is None else available_now:
        stream = stream.trigger(availableNow=True)
    elif cfg.trigger_interval > 0:
        stream = stream.trigger(processingTime=f"{round(cfg.trigger_interval * 1000)} milliseconds")
    query = stream.start()
    writer.bind(str(query.id))
    return query


def run(
    cfg: StreamConfig,
    *,
    available_now: bool | None = None,
    say: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
) -> int:
    """Run the pipeline until SIGTERM/SIGINT (or, with available_now, until caught up)."""
    stopping = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    spark = session(cfg)
    code = 0
    try:
        query = start(spark, cfg, available_now=available_now)
        say(f"spark-stream: query {query.id} started, writing to {cfg.path}")
        while not stopping.is_set():
            if query.awaitTermination(1):
                break
        if stopping.is_set():
            say("spark-stream: stopping")
            query.stop()
        error = query.exception()
        if error is not None:
            say(f"spark-stream: the query failed: {error}")
            code = 1
        else:
            progress = query.lastProgress
            say(f"spark-stream: stopped after batch {progress['batchId'] if progress else '-'}")
    finally:
        spark.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return code


def run_cli(config: str, *, check: bool = False, available_now: bool = False) -> int:
    """`loghubd spark-stream`: 0 done, 1 the query failed, 2 bad configuration."""
    import json

    try:
        cfg = load(config)
    except StreamConfigError as exc:
        print(f"{config}: invalid configuration:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return 2
    if check:
        print(json.dumps(cfg.redacted(), indent=2, default=str))
        return 0
    return run(cfg, available_now=available_now or None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="loghubd_spark.stream_app", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("-c", "--config", help="loghubd config file with [spark_stream]")
    parser.add_argument("--check", action="store_true", help="validate, print (secrets masked)")
    parser.add_argument("--available-now", action="store_true", help="read what is there, stop")
    parser.add_argument(
        "--path", action="store_true", help="print this file's path (for spark-submit) and exit"
    )
    args = parser.parse_args(argv)
    if args.path:
        print(Path(__file__).resolve())
        return 0
    if not args.config:
        parser.error("-c/--config is required")
    return run_cli(args.config, check=args.check, available_now=args.available_now)


if __name__ == "__main__":
    sys.exit(main())
