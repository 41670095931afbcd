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

Exit codes: 0 done, 1 the query failed (one line names the cause: the exception of our
`foreachBatch`, or the innermost Python exception in Spark's message), 2 bad configuration,
including a pipeline that fails over an empty batch (a `sql` that does not analyse, a
`function` that raises or returns no DataFrame: checked before the query starts). Without
`--debug` Spark logs only FATAL lines (a JVM thread's uncaught exception included) and
Python's tracebacks of a failing batch are not printed. A signal stops the query between
micro-batches (the one in progress may finish for up to 25 s). A query that fails while it
starts because Spark's Python source process did not connect back within Spark's fixed 10 s
(a busy host) is started again from its checkpoint, up to three starts in all
(`query_start`); a signal during the wait in between ends it, and the command.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from loghubd_spark.options import resolve_function
from loghubd_spark.query_start import start_past_worker_timeout
from loghubd_spark.runner import quiet_jvm_logging, under_spark_submit

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

from loghubd_spark.stream_config import (
    APP_NAME,
    SECTION,
    StreamConfig,
    StreamConfigError,
    load,
)

# Without --debug: Spark's console shows no log lines below FATAL (a failed query's Java and
# Python traces are ERROR lines) and no progress bar; the command prints the cause in one
# line. `[spark_stream.conf]` wins (e.g. "spark.log.level" = "WARN").
QUIET_CONF = {"spark.log.level": "FATAL", "spark.ui.showConsoleProgress": "false"}
# Python loggers that print tracebacks of a failing foreachBatch or SQL analysis.
NOISY_LOGGERS = ("py4j", "SQLQueryContextLogger")
# On a signal, the micro-batch in progress may finish for this long before the query is
# stopped (the processor's default `shutdown_budget`; systemd's stop timeout is above it).
STOP_WAIT_S = 25.0
STOP_POLL_S = 0.1
# How long a micro-batch held at its start after a signal waits for `query.stop()` to begin
# (it begins at once: the wait is a bound, not a delay), and how often it looks.
HOLD_S = 60.0
HOLD_POLL_S = 0.02
# What a write interrupted by `query.stop()` raises instead of py4j's error (`BatchWriter`).
# Spark tells a stop's interruption from a failure by matching the foreachBatch error's text
# with `StreamExecution.PROXY_ERROR`, `Py4JJavaError: An error occurred while
# calling((.|\r\n|\r|\n)*)(InterruptedException|...)`: a regex that recurses once per
# character, so py4j's text (the whole Java stack trace) overflows the stream thread's stack
# (`java.lang.StackOverflowError` in java.util.regex, a thousand lines on stderr). This text
# matches it in a few hundred characters: the stop stays a clean stop.
INTERRUPTED = (
    "the write was interrupted by the query's stop "
    "(py4j.protocol.Py4JJavaError: An error occurred while calling write: "
    "java.lang.InterruptedException)"
)

# -- Spark -------------------------------------------------------------------------------------


def quiet_python_loggers() -> None:
    from pyspark.logger import PySparkLogger

    for name in NOISY_LOGGERS:  # pyspark's own logger class: it logs with extra keywords
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)


def session(cfg: StreamConfig, *, debug: bool = True) -> SparkSession:
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
    quiet = {} if debug else QUIET_CONF
    if not debug and not under_spark_submit():  # (spark-submit started the JVM already)
        quiet_jvm_logging(os.environ)
    for key, value in {**DEFAULT_CONF, "spark.app.name": APP_NAME, **quiet, **cfg.conf}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    log_uncaught_jvm_exceptions(spark)
    return spark


def log_uncaught_jvm_exceptions(spark: SparkSession) -> None:
    """A JVM thread's uncaught exception goes to Spark's log (an ERROR line: not printed by the
    quiet profile, printed with --debug) rather than straight to stderr ("Exception in thread
    ..." and its stack trace), and does not end the driver (`exitOnUncaughtException=false`;
    an OutOfMemoryError still does). Spark's own handler, as its executors use."""
    jvm = spark._jvm
    if jvm is None:  # a Spark Connect session: no JVM in this process
        return
    handler = jvm.org.apache.spark.util.SparkUncaughtExceptionHandler(False)
    jvm.java.lang.Thread.setDefaultUncaughtExceptionHandler(handler)


class BatchInterrupted(RuntimeError):
    """A micro-batch's write that `query.stop()` interrupted (text: `INTERRUPTED`)."""


class BatchWriter:
    """`foreachBatch`: the pipeline, then the processor's idempotent write of one micro-batch
    (partitions `dt=*/batch=<query id>-<batch id>` replaced as a whole)."""

    def __init__(self, sql: str | None, function: str | None, sink: str, path: str) -> None:
        from loghubd_spark.jobs import Pipeline

        fn = resolve_function(function) if function else None
        self.pipeline = Pipeline(sql=sql, function=fn, section=SECTION)
        self.sink, self.path = sink, path
        self.tag = ""
        self.error: BaseException | None = None  # the last micro-batch's failure
        # Set on a signal: the next micro-batch is held at its start (`_hold_for_the_stop`),
        # which sets `held`, so that the stop comes between two batches' writes.
        self.stop_requested = threading.Event()
        self.held = threading.Event()
        # Set just before `query.stop()`: a write failing after it was interrupted by it.
        self.stopping = threading.Event()
        self.interrupted = False
        self._bound = threading.Event()
        self._is_active: Callable[[], bool] = lambda: True

    def bind(self, query_id: str, is_active: Callable[[], bool] | None = None) -> None:
        """The query's id (kept in its checkpoint, so it survives restarts) names its writes;
        `is_active` tells a held batch when the query's stop has begun."""
        self.tag = query_id.replace("-", "")[:12]
        if is_active is not None:
            self._is_active = is_active
        self._bound.set()

    def batch_name(self, batch_id: int) -> str:
        return f"{self.tag}-{batch_id:010d}"

    @staticmethod
    def prepare(df: DataFrame, name: str) -> DataFrame:
        """The batch as the pipeline sees it: the log columns, `dt` and `batch`."""
        from pyspark.sql import functions as F

        from loghubd_spark.jobs import BATCH_COLUMN, DATE_COLUMN

        df = df.withColumn(DATE_COLUMN, F.date_format(F.col("__time__"), "yyyy-MM-dd"))
        return df.withColumn(BATCH_COLUMN, F.lit(name))

    def check(self, spark: SparkSession) -> None:
        """Run the pipeline (`sql` or `function`) over an empty batch of the source's schema,
        before the query starts: a typo, a function that raises or returns no DataFrame fails
        at once, naming the key (`jobs.PipelineError`)."""
        from loghubd_spark.jobs import PipelineError, with_partitions
        from loghubd_spark.stream import SCHEMA_DDL

        empty = self.prepare(spark.createDataFrame([], SCHEMA_DDL), "check")
        try:
            out, done = self.pipeline.apply(spark, empty)
        except PipelineError:
            raise
        except Exception as exc:  # the user's function raised (the sql's errors are named)
            problem = _named(type(exc).__name__, _first_line(str(exc)))
            raise PipelineError(f"{SECTION}.function: {problem}") from exc
        try:
            with_partitions(out, "check").schema  # noqa: B018 (analyses the plan)
        finally:
            done()

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        if self.stop_requested.is_set():
            self._hold_for_the_stop()
        try:
            self._write(df, batch_id)
        except BaseException as exc:
            if self.stopping.is_set():
                # Not a failure: the stop interrupted it (Spark replays the micro-batch on
                # restart). A short text Spark recognises, without py4j's (see INTERRUPTED).
                self.interrupted = True
                raise BatchInterrupted(INTERRUPTED) from None
            self.error = exc
            raise

    def _hold_for_the_stop(self, timeout_s: float = HOLD_S) -> None:
        """A micro-batch that starts once the stop is asked for writes nothing: it waits
        (`held`) until `query.stop()` has begun (the query is no longer active), then ends as
        an interrupted write, which Spark replays on the next start. With batches back to
        back (a backlog, `trigger_interval = 0`) there is no moment between two triggers for
        the stop to use; without this the command waited out `STOP_WAIT_S` and then
        interrupted a write anyway."""
        self.held.set()
        deadline = time.monotonic() + timeout_s
        while self._still_active() and time.monotonic() < deadline:
            time.sleep(HOLD_POLL_S)
        self.interrupted = True
        raise BatchInterrupted(INTERRUPTED)

    def _still_active(self) -> bool:
        # A failed look (py4j's error, its text a whole Java stack) must not become the
        # batch's error: Spark's regex over such a text is what overflowed its stack.
        try:
            return self._is_active()
        except Exception:
            return False

    def _write(self, df: DataFrame, batch_id: int) -> None:
        from loghubd_spark.jobs import BATCH_COLUMN, DATE_COLUMN, with_partitions

        if not self._bound.wait(120):
            raise RuntimeError("the streaming query's id is not known")
        name = self.batch_name(batch_id)
        df = self.prepare(df, name)
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
    spark: SparkSession,
    cfg: StreamConfig,
    *,
    available_now: bool | None = None,
    writer: BatchWriter | None = None,
) -> StreamingQuery:
    """Register the source, start the query; returns it running."""
    from loghubd_spark.stream import LogHubDataSource

    spark.dataSource.register(LogHubDataSource)
    reader = spark.readStream.format("loghub")
    for key, value in cfg.source_options().items():
        reader = reader.option(key, value)
    if writer is None:
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
    writer.bind(str(query.id), lambda: bool(query.isActive))
    return query


# A Python exception line inside a traceback's text: `package.module.Name: message`.
_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_]\w*\.)*([A-Za-z_]\w*): (\S.*)$")
_STREAM_FAILED = re.compile(r"^\[STREAM_FAILED\] Query \[[^\]]*\] terminated with exception: ")


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _named(name: str, message: str) -> str:
    """`Name: message`, without repeating a name the message already starts with."""
    message = message.strip()
    return message if message.startswith(f"{name}:") else f"{name}: {message}"


def cause(error: BaseException, batch_error: BaseException | None = None) -> str:
    """One line naming why a query failed: the exception our foreachBatch raised (it runs in
    this process), else the innermost Python exception in Spark's message (the source runs
    in Python workers: their traceback is text inside a Java exception), else the message's
    first line."""
    from loghubd_spark.jobs import PipelineError

    if batch_error is not None:
        if isinstance(batch_error, PipelineError):  # names its key: spark_stream.sql: ...
            return _first_line(str(batch_error))
        return _named(type(batch_error).__name__, _first_line(str(batch_error)))
    text = str(error)
    lines = text.splitlines()
    marks = [i for i, line in enumerate(lines) if "Traceback (most recent call last):" in line]
    if marks:
        for line in lines[marks[-1] + 1 :]:
            match = _EXCEPTION_LINE.match(line)
            if match and not line[:1].isspace():
                return _named(match.group(1), match.group(2))
    return _STREAM_FAILED.sub("", _first_line(text)) or type(error).__name__


def stop_between_batches(
    query: StreamingQuery, writer: BatchWriter, *, wait_s: float = STOP_WAIT_S
) -> None:
    """Stop the query once the micro-batch in progress has finished (within `wait_s`), so
    that the stop does not interrupt a write: at once when no trigger is active, else as
    soon as the next micro-batch is held at its start (`BatchWriter.stop_requested`). A batch
    still running after `wait_s` is interrupted. A held or interrupted batch raises
    `BatchInterrupted`, and Spark replays it on restart."""
    writer.stop_requested.set()
    deadline = time.monotonic() + wait_s
    while query.isActive and time.monotonic() < deadline:
        if not query.status["isTriggerActive"] or writer.held.wait(STOP_POLL_S):
            break
    writer.stopping.set()
    query.stop()


def run(
    cfg: StreamConfig,
    *,
    available_now: bool | None = None,
    say: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
    debug: bool = False,
) -> int:
    """Run the pipeline until SIGTERM, SIGINT or SIGHUP (or, with available_now, until caught
    up): 0, 1 the query failed (one line says why), 2 the pipeline fails over an empty batch.
    Spark's console logging and Python's tracebacks are quiet unless `debug`."""
    from pyspark.errors import StreamingQueryException

    from loghubd_spark.jobs import PipelineError

    stopping = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    # SIGHUP too (a terminal's hang-up, `kill -HUP`): there is no file to reload in place, and
    # its default action would end the driver at once, in the middle of a micro-batch.
    stops = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    previous = {s: signal.signal(s, on_signal) for s in stops}
    if not debug:
        quiet_python_loggers()
    spark = session(cfg, debug=debug)
    code = 0
    try:
        writer = BatchWriter(cfg.sql, cfg.function, cfg.sink, cfg.path)
        try:
            writer.check(spark)
        except PipelineError as exc:
            problem = _first_line(str(exc))
            if not problem.startswith(f"{SECTION}."):  # with_partitions': the output's columns
                key = "sql" if writer.pipeline.sql is not None else "function"
                problem = f"{SECTION}.{key}: {problem}"
            say(f"spark-stream: invalid configuration: {problem}")
            return 2
        query = start_past_worker_timeout(
            lambda: start(spark, cfg, available_now=available_now, writer=writer),
            say=lambda line: say(f"spark-stream: {line}"),
            stopping=stopping,
        )
        if query.isActive or query.exception() is None:  # not one that failed while starting
            say(f"spark-stream: query {query.id} started, writing to {cfg.path}")
        while not stopping.is_set():
            try:
                if query.awaitTermination(1):
                    break
            except StreamingQueryException:  # the query failed: reported below
                break
        if stopping.is_set():
            say("spark-stream: stopping")
            stop_between_batches(query, writer)
        error = query.exception()
        if error is not None and not writer.interrupted:
            say(f"spark-stream: the query failed: {cause(error, writer.error)}")
            code = 1
        else:
            progress = query.lastProgress
            say(f"spark-stream: stopped after batch {progress['batchId'] if progress else '-'}")
    finally:
        spark.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return code


def run_cli(
    config: str, *, check: bool = False, available_now: bool = False, debug: bool = False
) -> int:
    """`loghubd spark-stream`: 0 done, 1 the query failed, 2 bad configuration (a pipeline
    that fails over an empty batch included)."""
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
    return run(cfg, available_now=available_now or None, debug=debug)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="loghubd_spark.stream_app", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("-c", "--config", help="loghubd config file with [spark_stream]")
    parser.add_argument("--check", action="store_true", help="validate, print (secrets masked)")
    parser.add_argument("--available-now", action="store_true", help="read what is there, stop")
    parser.add_argument("--debug", action="store_true", help="Spark's logs and tracebacks too")
    parser.add_argument(
        "--path", action="store_true", help="print this file's path (for spark-submit) and exit"
    )
    args = parser.parse_args(argv)
    if args.path:
        print(Path(__file__).resolve())
        return 0
    if not args.config:
        parser.error("-c/--config is required")
    return run_cli(
        args.config, check=args.check, available_now=args.available_now, debug=args.debug
    )


if __name__ == "__main__":
    sys.exit(main())
