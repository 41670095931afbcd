"""The `spark-stream` config file: `StreamConfig`, parsed from loghubd's format (`[source]`,
`[consumer]`, `[spark_stream]`, with `[processor.spark]` lending missing keys) and the
`LOGHUBD_*` environment overrides; every problem names its key (`StreamConfigError`). No
Spark here: `loghubd spark-stream --check` and the unit tests use it without a session.
"""

from __future__ import annotations

import contextlib
import math
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loghubd import redact_value
from loghubd_spark.options import LOGS_PLACEHOLDER, SINKS, endpoint_problem, resolve_function

if TYPE_CHECKING:
    pass

SECTION = "spark_stream"
APP_NAME = "loghubd-spark-stream"
# The consumer name of the source's commits when `[consumer] name` is not given.
DEFAULT_CONSUMER = "loghubd-spark-stream"
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
    "fail_on_data_loss",
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
    fail_on_data_loss: bool = True

    def source_options(self) -> dict[str, str]:
        """The `loghub` source's options (credentials included: never log this)."""
        out = {
            "endpoint": self.endpoint,
            "project": self.project,
            "logstore": self.logstore,
            "authVersion": self.auth_version,
            "startingPosition": self.start,
            "minPollIntervalMs": str(round(self.min_poll_interval * 1000)),
            "failOnDataLoss": "true" if self.fail_on_data_loss else "false",
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
                out[name] = "***"
            elif isinstance(value, Mapping):  # `conf`: spark.hadoop.fs.s3a.secret.key and kin
                out[name] = {k: redact_value(k, v) for k, v in value.items()}
            else:  # URL passwords in `path`, secret name=value pairs in a string
                out[name] = redact_value(name, value)
        # The effective values of keys left out. `order` unset follows the consumer group's
        # flag, which only the service knows (read when the query starts).
        out["consumer_name"] = self.consumer_name or DEFAULT_CONSUMER
        if self.order is None:
            out["order"] = "the consumer group's order flag, else false" if self.group else False
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
        fail_on_data_loss=spark.boolean("fail_on_data_loss", True) is not False,
    )
    if cfg.endpoint and (problem := endpoint_problem(cfg.endpoint)) is not None:
        problems.append(problem)
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
