"""`[processor.postgres]` checked without a database: every problem of the table at once,
each naming its key, what it takes and the value given in a config file's words."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from loghubd_postgres.options import Column, parse
from loghubd_postgres.rows import CONVERTERS

from loghubd import config
from loghubd.config import ConfigError

DSN = "postgresql://app@127.0.0.1:1/db"
TYPES = (
    "bigint, bool, boolean, date, double, double precision, int, integer, jsonb, numeric, real, "
    "smallint, text, timestamp with time zone, timestamptz"
)
PLAIN = "a plain SQL identifier (letters, digits and _, not starting with a digit)"
BASE = (
    '[source]\nendpoint = "http://127.0.0.1:1"\nproject = "proj"\nlogstore = "store"\n'
    '[consumer]\ngroup = "grp"\n[processor]\nname = "postgres"\n'
)


@pytest.mark.parametrize(
    ("options", "problems"),
    [
        (  # the brief's file: two wrong types, both named
            {"dsn": DSN, "table": "t", "connect_timeout_s": "10s", "create_table": "yes"},
            [
                "processor.postgres.connect_timeout_s: expected a number, got a string '10s'",
                "processor.postgres.create_table: expected true or false, got a string 'yes'",
            ],
        ),
        (  # wrong types and unknown keys in the table's order, then missing keys and values
            {
                "table": 3,
                "colums": {},
                "retry_max_backoff_s": "1m",
                "rest_column": ["rest"],
                "connect_timeout_s": -1,
                "positions_table": "a.b.c",
            },
            [
                "processor.postgres.table: expected a string, got an integer 3",
                "processor.postgres.colums: unknown key (did you mean processor.postgres.columns?)",
                "processor.postgres.retry_max_backoff_s: expected a number, got a string '1m'",
                "processor.postgres.rest_column: expected a string, got a list ['rest']",
                "processor.postgres.dsn: required",
                f"processor.postgres.positions_table: expected <table> or <schema>.<table>, "
                f"each {PLAIN}, got a string 'a.b.c'",
                "processor.postgres.connect_timeout_s: must be > 0, got an integer -1",
            ],
        ),
        (  # the columns: each mapped column checked, a column table's keys too
            {
                "dsn": DSN,
                "table": "1logs",
                "columns": {
                    "id": "varchar2",
                    "2n": "bigint",
                    "ts": {"feld": "__time__", "type": 5},
                    "level": {"field": "lvl"},
                    "msg": 7,
                    "rest": "text",
                },
                "rest_column": "rest",
            },
            [
                f"processor.postgres.table: expected <table> or <schema>.<table>, each {PLAIN}, "
                "got a string '1logs'",
                f"processor.postgres.columns.id: expected a column type (one of {TYPES}), "
                "got a string 'varchar2'",
                f"processor.postgres.columns.2n: expected {PLAIN}, got a string '2n'",
                "processor.postgres.columns.ts.feld: unknown key "
                "(did you mean processor.postgres.columns.ts.field?)",
                "processor.postgres.columns.ts.type: expected a string, got an integer 5",
                f"processor.postgres.columns.level.type: required: a column type (one of {TYPES})",
                'processor.postgres.columns.msg: expected a type ("bigint") or a table '
                "{field = ..., type = ...}, got an integer 7",
                "processor.postgres.columns.rest: the column is filled twice",
            ],
        ),
        (  # the backoffs: each > 0, the first no longer than the longest
            {"dsn": DSN, "table": "t", "retry_initial_backoff_s": 0, "retry_max_backoff_s": -1},
            [
                "processor.postgres.retry_initial_backoff_s: must be > 0, got an integer 0",
                "processor.postgres.retry_max_backoff_s: must be > 0, got an integer -1",
            ],
        ),
        (
            {"dsn": "", "table": "t", "retry_initial_backoff_s": 20, "retry_max_backoff_s": 5.5},
            [
                "processor.postgres.dsn: required",
                "processor.postgres.retry_initial_backoff_s: must be <= retry_max_backoff_s "
                "(5.5), got an integer 20",
            ],
        ),
        (  # a password is never quoted: masked in a DSN, left out under a secret's name
            {"dsn": ["postgresql://app:s3cr3t@db/logs"], "table": "t", "password": "s3cr3t"},
            [
                "processor.postgres.dsn: expected a string, got a list "
                "['postgresql://app:***@db/logs']",
                "processor.postgres.password: unknown key",
            ],
        ),
    ],
)
def test_every_problem_of_the_table_at_once(options: dict[str, Any], problems: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        parse(options)
    assert list(info.value.problems) == problems
    assert "s3cr3t" not in str(info.value)


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, {"document_column": "log", "create_table": False, "connect_timeout_s": 10.0}),
        ({"document_column": ""}, {"document_column": "log"}),  # empty: the default
        (
            {
                "table": "app.logs",
                "columns": {"id": "TEXT", "ts": {"field": "__time__", "type": "timestamptz"}},
                "rest_column": "rest",
                "create_table": True,
                "positions_table": "app.positions",
                "retry_initial_backoff_s": 1,
                "retry_max_backoff_s": float("inf"),
                "connect_timeout_s": 2.5,
            },
            {
                "schema": "app",
                "table": "logs",
                "columns": (Column("id", "id", "text"), Column("ts", "__time__", "timestamptz")),
                "rest_column": "rest",
                "document_column": None,
                "create_table": True,
                "positions_table": "app.positions",
                "retry_initial_backoff_s": 1.0,
                "retry_max_backoff_s": float("inf"),
                "connect_timeout_s": 2.5,
            },
        ),
    ],
)
def test_accepted(options: dict[str, Any], expected: dict[str, Any]) -> None:
    parsed = parse({"dsn": DSN, "table": "t", **options})
    assert {key: getattr(parsed, key) for key in expected} == expected


def test_a_table_from_a_config_file_is_accepted() -> None:
    """The daemon's config freezes the table (tables read-only): the columns still parse."""
    cfg = config.loads(
        f'{BASE}[processor.postgres]\ndsn = "{DSN}"\ntable = "t"\n'
        '[processor.postgres.columns]\nid = "text"\nts = { field = "__time__", type = "date" }\n',
        {},
    )
    parsed = parse(cfg.processor.selected_options)
    assert parsed.columns == (Column("id", "id", "text"), Column("ts", "__time__", "date"))


@pytest.mark.parametrize("command", ["check-config", "run"])
def test_check_config_and_run_print_every_bad_key_without_connecting(
    tmp_path: Path, command: str
) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        f'{BASE}[processor.postgres]\ndsn = "{DSN}"\ntable = "t"\n'
        'connect_timeout_s = "10s"\ncreate_table = "yes"\n'
    )
    done = subprocess.run(
        [sys.executable, "-m", "loghubd", command, "-c", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    header = {  # both name the file
        "check-config": f"{path}: invalid configuration:",
        "run": f"loghubd run: invalid configuration ({path}):",
    }[command]
    assert done.stderr.splitlines() == [
        header,
        "  processor.postgres.connect_timeout_s: expected a number, got a string '10s'",
        "  processor.postgres.create_table: expected true or false, got a string 'yes'",
    ]


# Two [[sources]], the second writing to the database: its messages name the entry.
MULTI = (
    '[ops]\nlisten = "127.0.0.1:0"\n'
    '[[sources]]\nname = "app"\nendpoint = "http://127.0.0.1:1"\nproject = "proj"\n'
    'logstore = "app"\n[sources.consumer]\ngroup = "grp"\n[sources.processor]\nname = "null"\n'
    '[[sources]]\nname = "db"\nendpoint = "http://127.0.0.1:1"\nproject = "proj"\n'
    'logstore = "store"\n[sources.consumer]\ngroup = "grp"\n[sources.processor]\n'
    f'name = "postgres"\n[sources.processor.postgres]\ndsn = "{DSN}"\ntable = "t"\n'
)


@pytest.mark.parametrize("layout", ["source", "sources"])
@pytest.mark.parametrize("command", ["check-config", "run"])
def test_a_database_down_at_start_exits_4_which_systemd_restarts(
    tmp_path: Path, command: str, layout: str
) -> None:
    """Nothing listens at the DSN's port: not a refused configuration (exit 2, which the unit's
    RestartPreventExitStatus keeps down for good) but "cannot reach" (4): systemd starts the
    daemon again until the database is back. With several sources the line names the one."""
    path = tmp_path / "c.toml"
    ops = '[ops]\nlisten = "127.0.0.1:0"\n'
    single = f'{BASE}[processor.postgres]\ndsn = "{DSN}"\ntable = "t"\n{ops}'
    path.write_text(MULTI if layout == "sources" else single)
    done = subprocess.run(
        [sys.executable, "-m", "loghubd", command, "-c", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 4, (done.stdout[-2000:], done.stderr)
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    where = "sources.db: " if layout == "sources" else ": "
    assert f"{where}processor.postgres.dsn: cannot connect:" in lines[0], lines
    assert "Connection refused" in lines[0], lines


@pytest.mark.parametrize(
    ("kind", "value", "why"),
    [
        ("integer", "twelve", "not an integer"),
        ("smallint", "70000", "70000 is out of range for smallint"),
        ("double precision", "fast", "not a number"),
        ("numeric", "1,5", "'1,5' is not a number"),
        ("boolean", "maybe", "'maybe' is not a boolean"),
        ("timestamptz", "yesterday", "neither unix seconds nor an ISO 8601 time"),
        ("date", "27/11/2026", "not an ISO 8601 date (YYYY-MM-DD)"),
        ("jsonb", "{oops", "not JSON text (Expecting property name enclosed in double quotes at "
         "character 1); a field mapped to a jsonb column must hold JSON, or map it to text"),
        ("text", "a\x00b", "text cannot hold a NUL character"),
    ],
)  # fmt: skip
def test_a_value_that_does_not_convert_says_why_in_words(kind: str, value: str, why: str) -> None:
    with pytest.raises(ValueError, match=re.escape(why)):
        CONVERTERS[kind](value)
