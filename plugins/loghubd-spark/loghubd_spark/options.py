"""`[processor.spark]`: parse and validate the processor's own table.

Every refusal is a ValueError naming the key as `processor.spark.<key>`, the way the daemon
reports its own configuration errors. Nothing here imports pyspark or pyarrow, so
`loghubd check-config` stays fast.
"""

from __future__ import annotations

import importlib
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

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


# Every accepted key and what it must be (checked in this order).
KEYS = (
    "master",
    "conf",
    "sql",
    "function",
    "sink",
    "path",
    "wal_dir",
    "max_rows",
    "max_bytes",
    "max_delay",
    "write_timeout",
    "shutdown_budget",
    "convert_processes",
)


def _key(key: str) -> str:
    return f"processor.{NAME}.{key}"


def _fail(key: str, why: str) -> ValueError:
    return ValueError(f"{_key(key)}: {why}")


def _type_name(value: object) -> str:
    return type(value).__name__


def _string(options: Mapping[str, Any], key: str, default: str | None) -> str | None:
    value = options.get(key, default)
    if value is None:
        return None
    if not isinstance(value, str):
        raise _fail(key, f"expected a string, got {_type_name(value)}")
    if not value.strip():
        raise _fail(key, "must not be empty")
    return value


def _positive_int(options: Mapping[str, Any], key: str, default: int) -> int:
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(key, f"expected an integer, got {_type_name(value)}")
    if value <= 0:
        raise _fail(key, f"must be > 0, got {value}")
    return value


def _count(options: Mapping[str, Any], key: str, default: int) -> int:
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(key, f"expected an integer, got {_type_name(value)}")
    if not 0 <= value <= 64:
        raise _fail(key, f"must be between 0 and 64, got {value}")
    return value


def _positive_seconds(options: Mapping[str, Any], key: str, default: float) -> float:
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _fail(key, f"expected a number of seconds, got {_type_name(value)}")
    if not math.isfinite(value) or value <= 0:
        raise _fail(key, f"must be a finite number > 0, got {value}")
    return float(value)


def _shutdown_budget(options: Mapping[str, Any]) -> float:
    value = _positive_seconds(options, "shutdown_budget", DEFAULT_SHUTDOWN_BUDGET)
    if not 1.0 <= value <= MAX_SHUTDOWN_BUDGET:
        raise _fail(
            "shutdown_budget",
            f"must be between 1 and {MAX_SHUTDOWN_BUDGET:g} seconds (the daemon allows a "
            f"processor's shutdown 30 s), got {value:g}",
        )
    return value


def _conf(options: Mapping[str, Any]) -> dict[str, str]:
    value = options.get("conf", {})
    if not isinstance(value, Mapping):
        raise _fail("conf", f"expected a table of spark.* keys, got {_type_name(value)}")
    conf: dict[str, str] = {}
    for k, v in value.items():
        if not isinstance(k, str) or not k.startswith("spark."):
            raise _fail(f"conf.{k}", "only spark.* keys are accepted (quote dotted keys in TOML)")
        if isinstance(v, bool):
            conf[k] = "true" if v else "false"
        elif isinstance(v, int | float | str):
            conf[k] = str(v)
        else:
            raise _fail(f"conf.{k}", f"expected a string, number or boolean, got {_type_name(v)}")
    return conf


def resolve_function(spec: str) -> Callable[[Any], Any]:
    """`module:function` (dotted attributes allowed after the colon) → the callable."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise _fail("function", f"expected 'module:function', got {spec!r}")
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
        for key in options:
            if key not in KEYS:
                raise _fail(str(key), f"unknown key (known: {', '.join(KEYS)})")
        master = _string(options, "master", DEFAULT_MASTER)
        assert master is not None
        conf = _conf(options)
        sql = _string(options, "sql", None)
        function = _string(options, "function", None)
        if sql is not None and function is not None:
            raise _fail("function", "give either sql or function, not both")
        if sql is not None and LOGS_PLACEHOLDER not in sql:
            example = f"SELECT * FROM {LOGS_PLACEHOLDER} WHERE ..."
            raise _fail("sql", f"must read the batch as {LOGS_PLACEHOLDER}, e.g. {example!r}")
        if function is not None:
            resolve_function(function)  # fail now, not at the first batch
        sink = _string(options, "sink", "parquet")
        if sink not in SINKS:
            raise _fail("sink", f"expected one of {', '.join(SINKS)}, got {sink!r}")
        path = _string(options, "path", None)
        if path is None:
            raise _fail("path", "required: the directory the sink writes to")
        wal_dir = _string(options, "wal_dir", None)
        if wal_dir is not None:
            if "://" in wal_dir and not wal_dir.startswith("file://"):
                raise _fail(
                    "wal_dir",
                    "must be a local (or POSIX-mounted) directory: the write-ahead log needs "
                    "atomic rename, fsync and flock",
                )
            wal_dir = wal_dir.removeprefix("file://")
        elif "://" in path and not path.startswith("file://"):
            raise _fail(
                "path",
                "is not a local directory, so the write-ahead log cannot live next to the "
                "output (it needs atomic rename, fsync and flock): set wal_dir to a local or "
                "POSIX-mounted directory that every daemon writing this path shares",
            )
        else:
            path = path.removeprefix("file://")
        return cls(
            path=path,
            wal_dir=wal_dir,
            master=master,
            conf=conf,
            sql=sql,
            function=function,
            sink=sink,
            max_rows=_positive_int(options, "max_rows", DEFAULT_MAX_ROWS),
            max_bytes=_positive_int(options, "max_bytes", DEFAULT_MAX_BYTES),
            max_delay=_positive_seconds(options, "max_delay", DEFAULT_MAX_DELAY),
            write_timeout=_positive_seconds(options, "write_timeout", DEFAULT_WRITE_TIMEOUT),
            shutdown_budget=_shutdown_budget(options),
            convert_processes=_count(options, "convert_processes", default_convert_processes()),
        )
