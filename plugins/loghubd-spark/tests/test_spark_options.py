"""`[processor.spark]` validation: every refusal names `processor.spark.<key>`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from loghubd_spark.options import DEFAULT_MAX_ROWS, SparkOptions

from loghubd import config
from loghubd.config import Config, ConfigError


def parse(**options: Any) -> SparkOptions:
    return SparkOptions.parse({"path": "/tmp/out", **options})


def test_defaults() -> None:
    o = parse()
    assert o.master == "local[*]"
    assert o.sink == "parquet"
    assert o.max_rows == DEFAULT_MAX_ROWS == 100_000
    assert o.max_delay == 10.0
    assert o.shutdown_budget == 25.0
    assert o.sql is None and o.function is None
    assert dict(o.conf) == {}
    assert 1 <= o.convert_processes <= 4
    assert parse(convert_processes=0).convert_processes == 0  # convert in the calling thread


def test_everything_given() -> None:
    o = parse(
        master="spark://h:7077",
        conf={"spark.driver.memory": "4g", "spark.sql.shuffle.partitions": 4, "spark.x": True},
        sql="SELECT * FROM {logs}",
        sink="jsonl",
        max_rows=10,
        max_bytes=1024,
        max_delay=0.5,
        write_timeout=30,
        shutdown_budget=5,
    )
    assert o.shutdown_budget == 5.0
    assert o.master == "spark://h:7077"
    assert dict(o.conf) == {
        "spark.driver.memory": "4g",
        "spark.sql.shuffle.partitions": "4",
        "spark.x": "true",
    }
    assert (o.sink, o.max_rows, o.max_bytes, o.max_delay, o.write_timeout) == (
        "jsonl",
        10,
        1024,
        0.5,
        30.0,
    )


def test_function_is_resolved() -> None:
    o = parse(function="spark_pipelines:tag_levels")
    assert o.function == "spark_pipelines:tag_levels"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"pth": "/x"}, "processor.spark.pth: unknown key"),
        ({"path": 3}, "processor.spark.path: expected a string, got an integer 3"),
        ({"path": ""}, "processor.spark.path: must not be empty"),
        ({"path": "s3a://bucket/x"}, "processor.spark.path: is not a local directory"),
        ({"max_rows": "10"}, "processor.spark.max_rows: expected an integer, got a string '10'"),
        ({"max_rows": True}, "processor.spark.max_rows: expected an integer, got true"),
        ({"max_rows": 0}, "processor.spark.max_rows: must be > 0"),
        ({"max_bytes": -1}, "processor.spark.max_bytes: must be > 0"),
        ({"max_delay": "1s"}, "processor.spark.max_delay: expected a number, got a string '1s'"),
        ({"convert_processes": -1}, "processor.spark.convert_processes: must be between 0"),
        ({"convert_processes": 1.5}, "processor.spark.convert_processes: expected an integer"),
        ({"max_delay": 0}, "processor.spark.max_delay: must be a finite number > 0"),
        ({"write_timeout": float("inf")}, "processor.spark.write_timeout: must be a finite"),
        ({"shutdown_budget": 0.5}, "processor.spark.shutdown_budget: must be between 1 and 25"),
        ({"shutdown_budget": 30}, "processor.spark.shutdown_budget: must be between 1 and 25"),
        ({"shutdown_budget": "5"}, "processor.spark.shutdown_budget: expected a number"),
        ({"sink": "csv"}, "processor.spark.sink: expected one of parquet, jsonl"),
        ({"master": ["local"]}, "processor.spark.master: expected a string, got a list ['local']"),
        ({"conf": "x"}, "processor.spark.conf: expected a table"),
        ({"conf": {"driver.memory": "1g"}}, "processor.spark.conf.driver.memory: only spark.*"),
        ({"conf": {"spark.a": [1]}}, "processor.spark.conf.spark.a: expected a string"),
        ({"sql": "SELECT * FROM logs"}, "processor.spark.sql: must read the batch as {logs}"),
        ({"sql": 1}, "processor.spark.sql: expected a string"),
        (
            {"sql": "SELECT * FROM {logs}", "function": "spark_pipelines:tag_levels"},
            "processor.spark.function: give either sql or function",
        ),
        ({"function": "nocolon"}, "processor.spark.function: expected 'module:function'"),
        ({"function": "no_such_module_xyz:f"}, "processor.spark.function: cannot import"),
        ({"function": "spark_pipelines:nope"}, "processor.spark.function: 'spark_pipelines' has"),
        ({"function": "spark_pipelines:FAIL_FLAG"}, "processor.spark.function: "),
    ],
)
def test_refusals_name_the_key(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match="^" + _escape(message)):
        SparkOptions.parse({"path": "/tmp/out", **options})


def test_path_is_required() -> None:
    with pytest.raises(ValueError, match=r"^processor\.spark\.path: required"):
        SparkOptions.parse({})


def test_file_uri_path_is_accepted() -> None:
    assert parse(path="file:///data/out").path == "/data/out"


def test_the_daemon_loads_the_plugin_and_check_config_validates(tmp_path: Any) -> None:
    """The entry point is installed: the daemon's plugin manager knows `spark`, and
    `spec.create` (what `loghubd check-config` calls) refuses a bad table with the key."""
    from loghubd.plugins.manager import Plugins

    spec = Plugins().processor("spark")
    factory = spec.create({"path": str(tmp_path)})
    assert callable(factory)
    with pytest.raises(ValueError, match=r"processor\.spark\.max_rows"):
        spec.create({"path": str(tmp_path), "max_rows": -5})


def _escape(text: str) -> str:
    import re

    return re.escape(text)


def test_a_remote_path_needs_a_local_wal_dir() -> None:
    with pytest.raises(ValueError, match=r"^processor\.spark\.path: is not a local .* wal_dir"):
        parse(path="s3a://bucket/lake")
    with pytest.raises(ValueError, match=r"^processor\.spark\.wal_dir: must be a local"):
        parse(path="s3a://bucket/lake", wal_dir="hdfs://nn/wal")
    opts = parse(path="s3a://bucket/lake", wal_dir="/var/lib/loghubd/wal")
    assert (opts.path, opts.wal_dir) == ("s3a://bucket/lake", "/var/lib/loghubd/wal")


def test_with_wal_dir_a_file_uri_path_is_kept_as_a_uri() -> None:
    opts = parse(path="file:///data/out", wal_dir="file:///var/wal")
    assert (opts.path, opts.wal_dir) == ("file:///data/out", "/var/wal")
    assert parse(path="/data/out").wal_dir is None


@pytest.mark.parametrize(
    ("options", "problems"),
    [
        (  # wrong types and unknown keys, in the table's order, then the values, key by key
            {
                "path": "/tmp/out",
                "max_rows": "10",
                "pth": "/x",
                "max_delay": "1s",
                "sink": "csv",
                "master": ["l"],
            },
            [
                "processor.spark.max_rows: expected an integer, got a string '10'",
                "processor.spark.pth: unknown key (did you mean processor.spark.path?)",
                "processor.spark.max_delay: expected a number, got a string '1s'",
                "processor.spark.master: expected a string, got a list ['l']",
                "processor.spark.sink: expected one of parquet, jsonl, got a string 'csv'",
            ],
        ),
        (  # values only: each range problem, with the value given
            {
                "path": "/tmp/out",
                "max_rows": 0,
                "max_bytes": -1,
                "write_timeout": float("inf"),
                "shutdown_budget": 30,
                "convert_processes": 65,
            },
            [
                "processor.spark.max_rows: must be > 0, got an integer 0",
                "processor.spark.max_bytes: must be > 0, got an integer -1",
                "processor.spark.write_timeout: must be a finite number > 0, got a number inf",
                "processor.spark.shutdown_budget: must be between 1 and 25 seconds (the daemon "
                "allows a processor's shutdown 30 s), got an integer 30",
                "processor.spark.convert_processes: must be between 0 and 64, got an integer 65",
            ],
        ),
        (  # a key of the wrong type is named once: no `required` for a path of the wrong type
            {"path": 3, "conf": {"spark.a": [1], "driver.memory": "1g"}, "max_rows": True},
            [
                "processor.spark.path: expected a string, got an integer 3",
                "processor.spark.max_rows: expected an integer, got true",
                "processor.spark.conf.spark.a: expected a string, a number or true or false, "
                "got a list [1]",
                "processor.spark.conf.driver.memory: only spark.* keys are accepted (quote "
                "dotted keys in TOML)",
            ],
        ),
        (
            {"sql": "SELECT 1", "function": "nocolon", "wal_dir": "hdfs://nn/wal"},
            [
                "processor.spark.function: give either sql or function, not both",
                "processor.spark.sql: must read the batch as {logs}, e.g. "
                "'SELECT * FROM {logs} WHERE ...'",
                "processor.spark.function: expected 'module:function', got a string 'nocolon'",
                "processor.spark.path: required: the directory the sink writes to",
                "processor.spark.wal_dir: must be a local (or POSIX-mounted) directory: the "
                "write-ahead log needs atomic rename, fsync and flock",
            ],
        ),
        (  # a secret is never quoted, not even a mistyped one
            {"path": "", "conf": {"spark.hadoop.fs.s3a.secret.key": ["s3cr3t"]}},
            [
                "processor.spark.conf.spark.hadoop.fs.s3a.secret.key: expected a string, a "
                "number or true or false, got a list",
                "processor.spark.path: must not be empty",
            ],
        ),
    ],
)
def test_every_problem_of_the_table_at_once(options: dict[str, Any], problems: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        SparkOptions.parse(options)
    assert list(info.value.problems) == problems


def test_a_table_from_a_config_file_is_accepted(tmp_path: Path) -> None:
    """The daemon's config freezes the table (arrays as tuples, tables read-only)."""
    cfg = loads(
        f'{BASE}[processor.spark]\npath = "{tmp_path}"\nmax_delay = 2\n'
        '[processor.spark.conf]\n"spark.driver.memory" = "1g"\n"spark.x" = [1]\n'
    )
    with pytest.raises(ConfigError, match=r"^processor\.spark\.conf\.spark\.x: .* got a list"):
        SparkOptions.parse(cfg.processor.selected_options)
    cfg = loads(
        f'{BASE}[processor.spark]\npath = "{tmp_path}"\nmax_delay = 2\n'
        '[processor.spark.conf]\n"spark.driver.memory" = "1g"\n'
    )
    o = SparkOptions.parse(cfg.processor.selected_options)
    assert (o.path, o.max_delay, dict(o.conf)) == (
        str(tmp_path),
        2.0,
        {"spark.driver.memory": "1g"},
    )


def test_check_config_prints_every_bad_key(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        f'{BASE}[processor.spark]\npath = "{tmp_path}"\nmax_rows = "10"\nmax_delay = "1s"\n'
        'sink = "csv"\n'
    )
    done = subprocess.run(
        [sys.executable, "-m", "loghubd", "check-config", "-c", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"{config}: invalid configuration:",
        "  processor.spark.max_rows: expected an integer, got a string '10'",
        "  processor.spark.max_delay: expected a number, got a string '1s'",
        "  processor.spark.sink: expected one of parquet, jsonl, got a string 'csv'",
    ]


BASE = (
    '[source]\nendpoint = "http://127.0.0.1:1"\nproject = "proj"\nlogstore = "store"\n'
    '[consumer]\ngroup = "grp"\n[processor]\nname = "spark"\n'
)


def loads(text: str) -> Config:
    return config.loads(text, {})
