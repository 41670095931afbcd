"""`loghubd spark-stream -c FILE`: a Structured Streaming pipeline from a loghubd config file.

    loghubd spark-stream -c stream.toml [--available-now] [--check]
    spark-submit --master yarn ... "$(python -m loghubd_spark.stream_app --path)" -c stream.toml

The file is loghubd's format: `[source]` (endpoint, project, logstore, credentials),
`[consumer]` (`group`: where progress is committed; `name`; `start`; `order`) and the pipeline
in `[spark_stream]`; a key missing there is taken from `[processor.spark]`, so a daemon's file
with the `spark` processor runs as a stream too (give `checkpoint_location`). The section is
parsed here from the raw TOML (not through `loghubd.config`); unknown keys and wrong types are
refused naming the key. Environment: `LOGHUBD_SOURCE__<KEY>`, `LOGHUBD_CONSUMER__<KEY>`,
`LOGHUBD_SPARK_STREAM__<KEY>` override the file (TOML literals when they parse as one).

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
import contextlib
import math
import os
import signal
import sys
import threading
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from loghubd_spark.options import LOGS_PLACEHOLDER, SINKS, resolve_function

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

SECTION = "spark_stream"
APP_NAME = "loghubd-spark-stream"
SOURCE_KEYS = (
    "endpoint",
    "project",
    "logstore",
    "access_key_id",
    "access_key_secret",
    "security_token",
    "auth_version",
    "region",
    "credentials",
    "credentials_file",
    "credentials_command",
    "credentials_command_timeout",
)
SECRET_KEYS = ("access_key_id", "access_key_secret", "security_token")
# [consumer] keys the stream uses; the daemon's other keys are accepted and ignored, except
# those that would change what is read (refused rather than silently ignored).
CONSUMER_USED = ("group", "name", "start", "order")
CONSUMER_REFUSED = ("query", "end", "shards")
STREAM_KEYS = (
    "path",
    "checkpoint_location",
    "sql",
    "function",
    "sink",
    "master",
    "conf",
    "trigger_interval",
    "available_now",
    "max_log_groups_per_trigger",
    "min_poll_interval",
)
# What `[processor.spark]` can lend to a missing `[spark_stream]` key.
FROM_PROCESSOR = ("path", "sql", "function", "sink", "master", "conf")
DEFAULT_TRIGGER_INTERVAL = 1.0


class StreamConfigError(ValueError):
    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


@dataclass(frozen=True, slots=True)
class StreamConfig:
    endpoint: str
    project: str
    logstore: str
    path: str
    checkpoint_location: str
    access_key_id: str = field(default="", repr=False)
    access_key_secret: str = field(default="", repr=False)
    security_token: str = field(default="", repr=False)
    auth_version: str = "v1"
    region: str = ""
    group: str = ""
    consumer_name: str = ""
    start: str = "begin"  # begin, end or unix seconds
    order: bool | None = None
    sql: str | None = None
    function: str | None = None
    sink: str = "parquet"
    master: str = ""  # "": spark-submit's, or local[*]
    conf: Mapping[str, str] = field(default_factory=dict)
    trigger_interval: float = DEFAULT_TRIGGER_INTERVAL
    available_now: bool = False
    max_log_groups_per_trigger: int = 0  # 0: no limit
    min_poll_interval: float = 0.5

    def source_options(self) -> dict[str, str]:
        """The `loghub` source's options (credentials included: never log this)."""
        out = {
            "endpoint": self.endpoint,
            "project": self.project,
            "logstore": self.logstore,
            "authVersion": self.auth_version,
            "startingPosition": self.start,
            "minPollIntervalMs": str(round(self.min_poll_interval * 1000)),
        }
        optional = {
            "accessKeyId": self.access_key_id,
            "accessKeySecret": self.access_key_secret,
            "securityToken": self.security_token,
            "region": self.region,
            "consumerGroup": self.group,
            "consumerName": self.consumer_name,
        }
        out.update({k: v for k, v in optional.items() if v})
        if self.order is not None:
            out["order"] = "true" if self.order else "false"
        if self.max_log_groups_per_trigger:
            out["maxLogGroupsPerTrigger"] = str(self.max_log_groups_per_trigger)
        return out

    def redacted(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if name in SECRET_KEYS and value:
                value = "***"
            out[name] = dict(value) if isinstance(value, Mapping) else value
        return out


# -- parsing --------------------------------------------------------------------------------------


def _env_value(text: str, current: object) -> object:
    """A TOML literal when it parses as one (`true`, `3`), else the text; text where the file
    already has a string."""
    if isinstance(current, str):
        return text
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def _overlay_env(data: dict[str, Any], environ: Mapping[str, str]) -> None:
    for section in ("source", "consumer", SECTION):
        prefix = f"LOGHUBD_{section.upper()}__"
        for name, text in environ.items():
            if not name.startswith(prefix):
                continue
            key = name[len(prefix) :].lower()
            table = data.setdefault(section, {})
            if isinstance(table, dict) and "__" not in key:
                table[key] = _env_value(text, table.get(key))


class _Reader:
    """Typed access to one table; problems are collected, each naming its key."""

    def __init__(self, section: str, table: Mapping[str, Any], problems: list[str]) -> None:
        self.section, self.table, self.problems = section, table, problems

    def fail(self, key: str, why: str) -> None:
        self.problems.append(f"{self.section}.{key}: {why}")

    def text(self, key: str, default: str | None = None, *, required: bool = False) -> str | None:
        value = self.table.get(key, default)
        if value is None:
            if required:
                self.fail(key, "required")
            return None
        if not isinstance(value, str):
            self.fail(key, f"expected a string, got {type(value).__name__}")
            return default
        if required and not value.strip():
            self.fail(key, "must not be empty")
        return value

    def boolean(self, key: str, default: bool | None) -> bool | None:
        value = self.table.get(key, default)
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        self.fail(key, f"expected true or false, got {value!r}")
        return default

    def number(self, key: str, default: float, *, integer: bool = False) -> float:
        value = self.table.get(key, default)
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                value = int(value) if integer else float(value)
        ok = isinstance(value, int) if integer else isinstance(value, int | float)
        if isinstance(value, bool) or not ok:
            kind = "an integer" if integer else "a number"
            self.fail(key, f"expected {kind}, got {type(value).__name__}")
            return default
        if not math.isfinite(value) or value < 0:
            self.fail(key, f"must be a finite number >= 0, got {value}")
            return default
        return float(value)


def _start(value: object, problems: list[str]) -> str:
    """`consumer.start` → the source's `startingPosition` (begin, end, unix seconds)."""
    key = "consumer.start"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(int(value))
    if isinstance(value, datetime):
        if value.tzinfo is None:
            problems.append(f"{key}: the timestamp needs a time zone (e.g. Z or +08:00)")
            return "begin"
        return str(int(value.timestamp()))
    if isinstance(value, str):
        text = value.strip()
        if text in ("begin", "end"):
            return text
        try:
            return str(int(float(text)))
        except ValueError:
            pass
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            parsed = None
        if parsed is not None and parsed.tzinfo is not None:
            return str(int(parsed.timestamp()))
    problems.append(f"{key}: expected begin, end, unix seconds or an ISO-8601 time with a zone")
    return "begin"


def parse(data: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> StreamConfig:
    """The stream's configuration from a loghubd config file's TOML (and the environment)."""
    raw: dict[str, Any] = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in data.items()}
    _overlay_env(raw, os.environ if environ is None else environ)
    problems: list[str] = []
    if "sources" in raw:
        problems.append("sources: spark-stream reads one logstore: use [source], not [[sources]]")
    tables: dict[str, Mapping[str, Any]] = {}
    for name in ("source", "consumer", SECTION, "processor"):
        table = raw.get(name, {})
        if not isinstance(table, Mapping):
            problems.append(f"{name}: expected a table")
            table = {}
        tables[name] = table
    processor = tables["processor"].get("spark", {})
    stream = dict(tables[SECTION])
    if isinstance(processor, Mapping):
        for key in FROM_PROCESSOR:
            if key not in stream and key in processor:
                stream[key] = processor[key]

    source = _Reader("source", tables["source"], problems)
    for key in tables["source"]:
        if key not in SOURCE_KEYS:
            source.fail(key, f"unknown key (known: {', '.join(SOURCE_KEYS)})")
    if source.text("credentials", "static") != "static":
        source.fail(
            "credentials",
            "spark-stream hands static keys to the executors: set access_key_id and "
            "access_key_secret (e.g. LOGHUBD_SOURCE__ACCESS_KEY_SECRET)",
        )
    consumer = _Reader("consumer", tables["consumer"], problems)
    for key in CONSUMER_REFUSED:
        if tables["consumer"].get(key) not in (None, "", []):
            consumer.fail(key, "not supported by spark-stream (it reads every shard, unfiltered)")
    spark = _Reader(SECTION, stream, problems)
    for key in stream:
        if key not in STREAM_KEYS:
            spark.fail(key, f"unknown key (known: {', '.join(STREAM_KEYS)})")

    auth_version = source.text("auth_version", "v1") or "v1"
    if auth_version not in ("v1", "v4"):
        source.fail("auth_version", f"expected v1 or v4, got {auth_version!r}")
    sql = spark.text("sql")
    function = spark.text("function")
    if sql is not None and function is not None:
        spark.fail("function", "give either sql or function, not both")
    if sql is not None and LOGS_PLACEHOLDER not in sql:
        spark.fail("sql", f"must read the batch as {LOGS_PLACEHOLDER}")
    if function is not None:
        try:
            resolve_function(function)
        except ValueError as exc:
            spark.fail("function", str(exc).split(": ", 1)[-1])
    sink = spark.text("sink", "parquet") or "parquet"
    if sink not in SINKS:
        spark.fail("sink", f"expected one of {', '.join(SINKS)}, got {sink!r}")
    conf: dict[str, str] = {}
    raw_conf = stream.get("conf", {})
    if not isinstance(raw_conf, Mapping):
        spark.fail("conf", "expected a table of spark.* keys")
    else:
        for k, v in raw_conf.items():
            if not str(k).startswith("spark."):
                spark.fail(f"conf.{k}", "only spark.* keys are accepted (quote dotted keys)")
            elif isinstance(v, bool):
                conf[str(k)] = "true" if v else "false"
            elif isinstance(v, int | float | str):
                conf[str(k)] = str(v)
            else:
                spark.fail(f"conf.{k}", "expected a string, number or boolean")
    path = spark.text("path", required=True) or ""
    checkpoint = spark.text("checkpoint_location", required=True) or ""
    cfg = StreamConfig(
        endpoint=source.text("endpoint", required=True) or "",
        project=source.text("project", required=True) or "",
        logstore=source.text("logstore", required=True) or "",
        path=path,
        checkpoint_location=checkpoint,
        access_key_id=source.text("access_key_id", "") or "",
        access_key_secret=source.text("access_key_secret", "") or "",
        security_token=source.text("security_token", "") or "",
        auth_version=auth_version,
        region=source.text("region", "") or "",
        group=consumer.text("group", "") or "",
        consumer_name=consumer.text("name", "") or "",
        start=_start(tables["consumer"].get("start", "begin"), problems),
        order=consumer.boolean("order", None),
        sql=sql,
        function=function,
        sink=sink,
        master=spark.text("master", "") or "",
        conf=conf,
        trigger_interval=spark.number("trigger_interval", DEFAULT_TRIGGER_INTERVAL),
        available_now=bool(spark.boolean("available_now", False)),
        max_log_groups_per_trigger=int(spark.number("max_log_groups_per_trigger", 0, integer=True)),
        min_poll_interval=spark.number("min_poll_interval", 0.5),
    )
    if cfg.auth_version == "v4" and not cfg.region:
        problems.append("source.region: required with auth_version v4")
    if bool(cfg.access_key_id) != bool(cfg.access_key_secret):
        problems.append("source.access_key_secret: give access_key_id and the secret, or neither")
    if problems:
        raise StreamConfigError(problems)
    return cfg


def load(path: str | Path, environ: Mapping[str, str] | None = None) -> StreamConfig:
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise StreamConfigError([f"{path}: {exc}"]) from exc
    return parse(data, environ)


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
