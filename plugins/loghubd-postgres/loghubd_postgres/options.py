"""The `[processor.postgres]` table: parsed and checked without touching the database.

Pure: no I/O. Every problem of the table is refused at once: one `ConfigError` (a
`ValueError`) with a line per problem, each starting with the key
(`processor.postgres.<key>: why`) and quoting the value given in a config file's words
(`expected a number, got a string '10s'`), which the daemon prints before exiting 2. The
types are checked by the core's `loghubd.processors.options`, as the built-in processors'.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import psycopg

from loghubd.processors.options import ConfigError, Types, option_problem, typed_options
from loghubd_postgres.failures import first_line

NAME = "postgres"
PREFIX = f"processor.{NAME}"

# The column types a mapped field may have (and how `create_table` spells them).
TYPES = {
    "text": "text",
    "smallint": "smallint",
    "integer": "integer",
    "int": "integer",
    "bigint": "bigint",
    "real": "real",
    "double precision": "double precision",
    "double": "double precision",
    "numeric": "numeric",
    "boolean": "boolean",
    "bool": "boolean",
    "timestamptz": "timestamptz",
    "timestamp with time zone": "timestamptz",
    "date": "date",
    "jsonb": "jsonb",
}

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


@dataclass(frozen=True, slots=True)
class Column:
    """One table column filled from one log field (`field`) converted to `type`."""

    name: str
    field: str
    type: str  # a value of TYPES


@dataclass(frozen=True, slots=True)
class Options:
    dsn: str
    schema: str | None
    table: str
    columns: tuple[Column, ...]
    rest_column: str | None  # jsonb: the fields no column maps
    document_column: str | None  # jsonb: the whole log
    create_table: bool
    positions_table: str
    retry_initial_backoff_s: float
    retry_max_backoff_s: float
    connect_timeout_s: float
    lock_timeout_s: float

    @property
    def all_columns(self) -> list[tuple[str, str]]:
        """(name, type) of every column a row fills, in COPY order."""
        out = [(c.name, c.type) for c in self.columns]
        if self.rest_column:
            out.append((self.rest_column, "jsonb"))
        if self.document_column:
            out.append((self.document_column, "jsonb"))
        return out


_ALLOWED: dict[str, Types] = {
    "dsn": str,
    "table": str,
    "columns": Mapping,
    "rest_column": str,
    "document_column": str,
    "create_table": bool,
    "positions_table": str,
    "retry_initial_backoff_s": (int, float),
    "retry_max_backoff_s": (int, float),
    "connect_timeout_s": (int, float),
    "lock_timeout_s": (int, float),
}
# A column given as a table: `id = { field = "request_id", type = "text" }`.
_COLUMN: dict[str, Types] = {"field": str, "type": str}
_PLAIN = "a plain SQL identifier (letters, digits and _, not starting with a digit)"


class _Problems:
    """The problems of the table, gathered to be raised together, each naming its key."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def add(self, key: str, why: str, *value: Any) -> None:
        self.lines.append(option_problem(NAME, key, why, *value))

    def ident(self, key: str, value: str) -> bool:
        if _IDENT.match(value):
            return True
        self.add(key, f"expected {_PLAIN}", value)
        return False

    def qualified(self, key: str, value: str) -> tuple[str | None, str]:
        """`<table>` or `<schema>.<table>`: (the schema or None, the table)."""
        parts = value.split(".")
        if len(parts) <= 2 and all(_IDENT.match(part) for part in parts):
            return (parts[0], parts[1]) if len(parts) == 2 else (None, parts[0])
        self.add(key, f"expected <table> or <schema>.<table>, each {_PLAIN}", value)
        return None, value

    def column(self, name: str, spec: Any) -> Column | None:
        key = f"columns.{name}"
        named = self.ident(key, name)
        type_name: str | None
        if isinstance(spec, str):
            field, type_name, where = name, spec, key
        elif isinstance(spec, Mapping):
            given = typed_options(f"{NAME}.{key}", spec, _COLUMN, self.lines)
            field, type_name, where = given.get("field", name), given.get("type"), f"{key}.type"
            if type_name is None:
                if "type" not in spec:  # else refused for its type by typed_options
                    self.add(where, f"required: a column type (one of {', '.join(sorted(TYPES))})")
                return None
        else:
            self.add(key, 'expected a type ("bigint") or a table {field = ..., type = ...}', spec)
            return None
        canonical = TYPES.get(type_name.strip().lower())
        if canonical is None:
            self.add(
                where, f"expected a column type (one of {', '.join(sorted(TYPES))})", type_name
            )
            return None
        return Column(name, field, canonical) if named else None

    def positive(self, key: str, given: Mapping[str, Any], default: float) -> float | None:
        """The number under `key` (`default` if not given); None, noted, if not > 0."""
        value = float(given.get(key, default))
        if value > 0:  # not NaN either
            return value
        self.add(key, "must be > 0", given[key])
        return None


def parse(options: Mapping[str, Any]) -> Options:
    """Check the processor's table; raise one ConfigError naming every bad key."""
    problems = _Problems()
    given = typed_options(NAME, options, _ALLOWED, problems.lines)
    for key in ("dsn", "table"):
        if key not in options or (key in given and not given[key]):
            problems.add(key, "required")
    if given.get("dsn"):
        try:  # libpq's parser alone (no I/O): a DSN it cannot read is the file's to fix
            psycopg.conninfo.conninfo_to_dict(given["dsn"])
        except psycopg.Error as exc:
            problems.add("dsn", f"not a DSN libpq can read: {first_line(exc, given['dsn'])}")
    schema, table = (
        problems.qualified("table", given["table"]) if given.get("table") else (None, "")
    )
    mapped = [problems.column(str(n), spec) for n, spec in given.get("columns", {}).items()]
    columns = tuple(c for c in mapped if c is not None)
    rest = given.get("rest_column")
    document = given.get("document_column")
    if not mapped and not document and not rest:
        document = "log"  # nothing mapped: the whole log as jsonb
    if rest is not None:
        problems.ident("rest_column", rest)
    if document is not None:
        problems.ident("document_column", document)
    names = [c.name for c in columns] + [n for n in (rest, document) if n]
    for name in dict.fromkeys(n for n in names if names.count(n) > 1):
        problems.add(f"columns.{name}", "the column is filled twice")
    positions = given.get("positions_table", "loghubd_positions")
    problems.qualified("positions_table", positions)
    initial = problems.positive("retry_initial_backoff_s", given, 0.2)
    maximum = problems.positive("retry_max_backoff_s", given, 10.0)
    if initial is not None and maximum is not None and initial > maximum:
        why = f"must be <= retry_max_backoff_s ({maximum:g})"
        problems.add("retry_initial_backoff_s", why, given.get("retry_initial_backoff_s", 0.2))
    timeout = problems.positive("connect_timeout_s", given, 10.0)
    lock_timeout = problems.positive("lock_timeout_s", given, 30.0)
    if problems.lines:
        raise ConfigError(problems.lines)
    assert initial is not None and maximum is not None and timeout is not None
    assert lock_timeout is not None
    return Options(
        dsn=given["dsn"],
        schema=schema,
        table=table,
        columns=columns,
        rest_column=rest,
        document_column=document,
        create_table=given.get("create_table", False),
        positions_table=positions,
        retry_initial_backoff_s=initial,
        retry_max_backoff_s=maximum,
        connect_timeout_s=timeout,
        lock_timeout_s=lock_timeout,
    )
