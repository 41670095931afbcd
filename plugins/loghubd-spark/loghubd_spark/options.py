"""`[processor.spark]`: parse and validate the processor's own table.

Every problem of the table is refused at once: one `ConfigError` (a ValueError) with a line
per problem, each naming the key as `processor.spark.<key>` and quoting the value given in a
config file's words (`expected an integer, got a string '10'`), the way the daemon reports
its own configuration errors; the types are checked by the core's
`loghubd.processors.options`, as the built-in processors'. Nothing here imports pyspark or
pyarrow, so `loghubd check-config` stays fast.
"""

from __future__ import annotations

import importlib
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from loghubd.processors.options import ConfigError, Types, option_problem, typed_options

NAME = "spark"
LOGS_PLACEHOLDER = "{logs}"
SINKS = ("parquet", "jsonl")

DEFAULT_MASTER = "local[*]"
DEFAULT_MAX_ROWS = 100_000
DEFAULT_MAX_BYTES = 64 * 1024 * 1024  # Arrow bytes buffered before a write
DEFAULT_MAX_DELAY = 10.0
DEFAULT_WRITE_TIMEOUT = 600.0
# A shard's last write at shutdown or rebalance must end before the daemon's 30 s limit on a
# processor's shutdown; less suits a pod whose terminationGracePeriodSeconds is short.
DEFAULT_SHUTDOWN_BUDGET = 25.0
MAX_SHUTDOWN_BUDGET = 25.0


def default_convert_processes() -> int:
    """One conversion child per spare core, at least one, at most four."""
    return max(1, min(4, (os.cpu_count() or 2) - 1))


# Every accepted key and its type (values are checked in this order).
TYPES: dict[str, Types] = {
    "master": str,
    "conf": Mapping,
    "sql": str,
    "function": str,
    "sink": str,
    "path": str,
    "wal_dir": str,
    "max_rows": int,
    "max_bytes": int,
    "max_delay": (int, float),
    "write_timeout": (int, float),
    "shutdown_budget": (int, float),
    "convert_processes": int,
}
KEYS = tuple(TYPES)


def _fail(key: str, why: str, *value: Any) -> ValueError:
    return ValueError(option_problem(NAME, key, why, *value))


class _Problems:
    """The table's values of the right type (`given`) and its problems, gathered to be raised
    together, each naming its key; a key of the wrong type is named once, by its type."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.lines: list[str] = []
        self.given = typed_options(NAME, options, TYPES, self.lines)

    def add(self, key: str, why: str, *value: Any) -> None:
        self.lines.append(option_problem(NAME, key, why, *value))

    def string(self, key: str) -> str | None:
        value: str | None = self.given.get(key)
        if value is not None and not value.strip():
            self.add(key, "must not be empty")
            return None
        return value

    def positive_int(self, key: str, default: int) -> int:
        value: int = self.given.get(key, default)
        if value <= 0:
            self.add(key, "must be > 0", value)
        return value

    def count(self, key: str, default: int) -> int:
        value: int = self.given.get(key, default)
        if not 0 <= value <= 64:
            self.add(key, "must be between 0 and 64", value)
        return value

    def positive_seconds(self, key: str, default: float) -> float:
        value = self.given.get(key, default)
        if not math.isfinite(value) or value <= 0:
            self.add(key, "must be a finite number > 0", value)
        return float(value)

    def shutdown_budget(self) -> float:
        key = "shutdown_budget"
        value = self.given.get(key, DEFAULT_SHUTDOWN_BUDGET)
        if not (math.isfinite(value) and 1.0 <= value <= MAX_SHUTDOWN_BUDGET):
            why = (
                f"must be between 1 and {MAX_SHUTDOWN_BUDGET:g} seconds (the daemon allows a "
                "processor's shutdown 30 s)"
            )
            self.add(key, why, value)
        return float(value)

    def conf(self) -> dict[str, str]:
        conf: dict[str, str] = {}
        for k, v in self.given.get("conf", {}).items():
            if not isinstance(k, str) or not k.startswith("spark."):
                why = "only spark.* keys are accepted (quote dotted keys in TOML)"
                self.add(f"conf.{k}", why)
            elif isinstance(v, bool):
                conf[k] = "true" if v else "false"
            elif isinstance(v, int | float | str):
                conf[k] = str(v)
            else:
                self.add(f"conf.{k}", "expected a string, a number or true or false", v)
        return conf


def resolve_function(spec: str) -> Callable[[Any], Any]:
    """`module:function` (dotted attributes allowed after the colon) → the callable."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise _fail("function", "expected 'module:function'", spec)
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or the module failing at import time
        raise _fail("function", f"cannot import {module_name!r}: {exc!r}") from exc
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise _fail("function", f"{module_name!r} has no attribute {attr!r}") from None
    if not callable(target):
        raise _fail("function", f"{spec!r} is not callable")
    return target  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class SparkOptions:
    path: str  # a local directory; with wal_dir, any URI Spark writes to (s3a://, hdfs://)
    wal_dir: str | None = None  # where the write-ahead log lives (default: inside `path`)
    master: str = DEFAULT_MASTER
    conf: Mapping[str, str] = field(default_factory=dict)
    sql: str | None = None
    function: str | None = None
    sink: str = "parquet"
    max_rows: int = DEFAULT_MAX_ROWS
    max_bytes: int = DEFAULT_MAX_BYTES
    max_delay: float = DEFAULT_MAX_DELAY
    write_timeout: float = DEFAULT_WRITE_TIMEOUT
    shutdown_budget: float = DEFAULT_SHUTDOWN_BUDGET
    convert_processes: int = field(default_factory=default_convert_processes)

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> SparkOptions:
        """The checked table; one ConfigError naming every bad key."""
        problems = _Problems(options)
        master = problems.string("master") or DEFAULT_MASTER
        conf = problems.conf()
        sql = problems.string("sql")
        function = problems.string("function")
        if sql is not None and function is not None:
            problems.add("function", "give either sql or function, not both")
        if sql is not None and LOGS_PLACEHOLDER not in sql:
            example = f"SELECT * FROM {LOGS_PLACEHOLDER} WHERE ..."
            problems.add("sql", f"must read the batch as {LOGS_PLACEHOLDER}, e.g. {example!r}")
        if function is not None:
            try:
                resolve_function(function)  # fail now, not at the first batch
            except ValueError as exc:
                problems.lines.append(str(exc))
        sink = problems.given.get("sink", "parquet")
        if sink not in SINKS:
            problems.add("sink", f"expected one of {', '.join(SINKS)}", sink)
        path = problems.string("path")
        if path is None and "path" not in options:
            problems.add("path", "required: the directory the sink writes to")
        wal_dir = problems.string("wal_dir")
        if wal_dir is not None:
            if "://" in wal_dir and not wal_dir.startswith("file://"):
                problems.add(
                    "wal_dir",
                    "must be a local (or POSIX-mounted) directory: the write-ahead log needs "
                    "atomic rename, fsync and flock",
                )
            wal_dir = wal_dir.removeprefix("file://")
        elif path is not None and "://" in path and not path.startswith("file://"):
            problems.add(
                "path",
                "is not a local directory, so the write-ahead log cannot live next to the "
                "output (it needs atomic rename, fsync and flock): set wal_dir to a local or "
                "POSIX-mounted directory that every daemon writing this path shares",
            )
        elif path is not None:
            path = path.removeprefix("file://")
        parsed = cls(
            path=path or "",
            wal_dir=wal_dir,
            master=master,
            conf=conf,
            sql=sql,
            function=function,
            sink=sink,
            max_rows=problems.positive_int("max_rows", DEFAULT_MAX_ROWS),
            max_bytes=problems.positive_int("max_bytes", DEFAULT_MAX_BYTES),
            max_delay=problems.positive_seconds("max_delay", DEFAULT_MAX_DELAY),
            write_timeout=problems.positive_seconds("write_timeout", DEFAULT_WRITE_TIMEOUT),
            shutdown_budget=problems.shutdown_budget(),
            convert_processes=problems.count("convert_processes", default_convert_processes()),
        )
        if problems.lines:
            raise ConfigError(problems.lines)
        return parsed


def endpoint_problem(endpoint: str) -> str | None:
    """What the daemon says of `[source] endpoint` (`source.endpoint: expected an http:// or
    https:// URL ...`), or None: the core's own check (`loghubd.config.SourceConfig`), so that
    the streaming source and `spark-stream` refuse what `loghubd run` refuses (an endpoint
    without a scheme would otherwise be used as plain http://)."""
    from loghubd.config import ConfigError as CoreConfigError
    from loghubd.config import SourceConfig

    try:  # project and logstore only fill the fields: their own problems are not ours here
        SourceConfig(endpoint=endpoint, project="loghubd", logstore="loghubd")
    except CoreConfigError as exc:
        return next((p for p in exc.problems if p.startswith("source.endpoint:")), None)
    return None
