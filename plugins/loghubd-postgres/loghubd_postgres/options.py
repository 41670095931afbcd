"""The `[processor.postgres]` table: parsed and checked without touching the database.

Pure: no I/O. Every refusal is a `ValueError` whose message starts with the key
(`processor.postgres.<key>: why`), which the daemon prints before exiting 2.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

PREFIX = "processor.postgres"

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

    @property
    def all_columns(self) -> list[tuple[str, str]]:
        """(name, type) of every column a row fills, in COPY order."""
        out = [(c.name, c.type) for c in self.columns]
        if self.rest_column:
            out.append((self.rest_column, "jsonb"))
        if self.document_column:
            out.append((self.document_column, "jsonb"))
        return out


_ALLOWED: dict[str, Any] = {
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
}


def _ident(key: str, value: str) -> str:
    if not _IDENT.match(value):
        raise ValueError(
            f"{PREFIX}.{key}: {value!r} is not a plain SQL identifier "
            "(letters, digits and _, not starting with a digit)"
        )
    return value


def _qualified(key: str, value: str) -> tuple[str | None, str]:
    parts = value.split(".")
    if len(parts) > 2:
        raise ValueError(f"{PREFIX}.{key}: {value!r}: use <table> or <schema>.<table>")
    if len(parts) == 2:
        return _ident(key, parts[0]), _ident(key, parts[1])
    return None, _ident(key, parts[0])


def _column(name: str, spec: Any) -> Column:
    key = f"columns.{name}"
    _ident(key, name)
    if isinstance(spec, str):
        field, type_name = name, spec
    elif isinstance(spec, Mapping):
        unknown = set(spec) - {"field", "type"}
        if unknown:
            raise ValueError(f"{PREFIX}.{key}.{sorted(unknown)[0]}: unknown key")
        field, given = str(spec.get("field", name)), spec.get("type")
        if not isinstance(given, str):
            raise ValueError(f"{PREFIX}.{key}.type: required (one of {', '.join(TYPES)})")
        type_name = given
    else:
        raise ValueError(f'{PREFIX}.{key}: a type ("bigint") or {{field = ..., type = ...}}')
    canonical = TYPES.get(type_name.strip().lower())
    if canonical is None:
        raise ValueError(
            f"{PREFIX}.{key}: unknown type {type_name!r} (one of {', '.join(sorted(TYPES))})"
        )
    return Column(name, field, canonical)


def parse(options: Mapping[str, Any]) -> Options:
    """Check the processor's table; raise ValueError naming the key."""
    for key, value in options.items():
        if key not in _ALLOWED:
            raise ValueError(f"{PREFIX}.{key}: unknown key")
        want = _ALLOWED[key]
        if not isinstance(value, want) or (want is not bool and isinstance(value, bool)):
            raise ValueError(f"{PREFIX}.{key}: wrong type {type(value).__name__}")
    for key in ("dsn", "table"):
        if not options.get(key):
            raise ValueError(f"{PREFIX}.{key}: required")
    schema, table = _qualified("table", options["table"])
    columns = tuple(_column(n, s) for n, s in dict(options.get("columns", {})).items())
    rest = options.get("rest_column")
    document = options.get("document_column")
    if not columns and not document and not rest:
        document = "log"  # nothing mapped: the whole log as jsonb
    if rest is not None:
        _ident("rest_column", rest)
    if document is not None:
        _ident("document_column", document)
    names = [c.name for c in columns] + [n for n in (rest, document) if n]
    for name in names:
        if names.count(name) > 1:
            raise ValueError(f"{PREFIX}.columns.{name}: the column is filled twice")
    positions = options.get("positions_table", "loghubd_positions")
    _qualified("positions_table", positions)
    initial = float(options.get("retry_initial_backoff_s", 0.2))
    maximum = float(options.get("retry_max_backoff_s", 10.0))
    if not 0 < initial <= maximum:
        raise ValueError(f"{PREFIX}.retry_initial_backoff_s: must be > 0 and <= the maximum")
    timeout = float(options.get("connect_timeout_s", 10.0))
    if timeout <= 0:
        raise ValueError(f"{PREFIX}.connect_timeout_s: must be > 0")
    return Options(
        dsn=options["dsn"],
        schema=schema,
        table=table,
        columns=columns,
        rest_column=rest,
        document_column=document,
        create_table=bool(options.get("create_table", False)),
        positions_table=positions,
        retry_initial_backoff_s=initial,
        retry_max_backoff_s=maximum,
        connect_timeout_s=timeout,
    )
