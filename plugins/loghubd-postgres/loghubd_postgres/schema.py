"""Start-up checks against the database: reachable, table present (or created), columns known.

Runs once, synchronously, when the daemon builds the processor: a refusal is a `ValueError`
naming the key (`processor.postgres.dsn: cannot connect: ...`), so `loghubd run` and
`loghubd check-config` exit 2 with the reason before consuming anything.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from loghubd import SinkUnreachable
from loghubd_postgres.options import PREFIX, Options

# What information_schema calls the types of TYPES (a mapped column must have one of these).
_CATALOG_NAMES = {
    "text": {"text", "character varying", "character"},
    "smallint": {"smallint", "integer", "bigint", "numeric"},
    "integer": {"integer", "bigint", "numeric"},
    "bigint": {"bigint", "numeric"},
    "real": {"real", "double precision", "numeric"},
    "double precision": {"double precision", "numeric"},
    "numeric": {"numeric"},
    "boolean": {"boolean"},
    "timestamptz": {"timestamp with time zone", "timestamp without time zone"},
    "date": {"date"},
    "jsonb": {"jsonb", "json"},
}


def table_name(schema: str | None, table: str) -> sql.Composable:
    return sql.Identifier(schema, table) if schema else sql.Identifier(table)


def positions_name(options: Options) -> sql.Composable:
    schema, _, table = options.positions_table.rpartition(".")
    return table_name(schema or None, table)


def positions_ddl(options: Options) -> sql.Composed:
    """The table of stored positions: one row per (project, group, logstore, shard)."""
    return sql.SQL(
        "CREATE TABLE IF NOT EXISTS {} ("
        " project text NOT NULL, consumer_group text NOT NULL, logstore text NOT NULL,"
        " shard integer NOT NULL, cursor text, position bigint, consumer text,"
        " rows_written bigint NOT NULL DEFAULT 0, updated_at timestamptz,"
        " PRIMARY KEY (project, consumer_group, logstore, shard))"
    ).format(positions_name(options))


def set_aside_name(options: Options) -> sql.Composable:
    """`<positions_table>_set_aside`, in the positions table's schema."""
    schema, _, table = options.positions_table.rpartition(".")
    return table_name(schema or None, f"{table}_set_aside")


def set_aside_ddl(options: Options) -> sql.Composed:
    """The ranges a shard set aside (rows the table refused, so the batch went to the failure
    policy): what `loghubd dead-letters replay` may write once, behind the stored position.
    A range written later in order (a retry that succeeded) is deleted from it."""
    return sql.SQL(
        "CREATE TABLE IF NOT EXISTS {} ("
        " project text NOT NULL, consumer_group text NOT NULL, logstore text NOT NULL,"
        " shard integer NOT NULL, start_position bigint NOT NULL, end_position bigint NOT NULL,"
        " cursor text NOT NULL, next_cursor text NOT NULL, error text, consumer text,"
        " set_aside_at timestamptz NOT NULL DEFAULT now(), replayed_at timestamptz,"
        " rows_written bigint,"
        " PRIMARY KEY (project, consumer_group, logstore, shard, start_position))"
    ).format(set_aside_name(options))


def table_ddl(options: Options) -> sql.Composed:
    """The data table. No unique constraint: exactly once comes from the positions, and a
    constraint would only hide duplicates."""
    cols = sql.SQL(", ").join(
        sql.SQL("{} {}").format(sql.Identifier(name), sql.SQL(kind))
        for name, kind in options.all_columns
    )
    return sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(
        table_name(options.schema, options.table), cols
    )


# What a server says, at connection time, of a state it will leave by itself.
_PASSING = (
    "the database system is starting up",
    "the database system is shutting down",
    "the database system is in recovery mode",
    "the database system is not yet accepting connections",
    "too many clients",
    "remaining connection slots are reserved",
)


def _a(kind: str) -> str:
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def refused_by_the_server(exc: BaseException) -> bool:
    """Whether a failed connection was a server's answer that retrying will not change (a
    wrong password, a database or role that does not exist), as opposed to no answer at all
    or a passing state. libpq gives connection errors no SQLSTATE: the server's own
    `FATAL:` line tells."""
    text = str(exc)
    return "FATAL:" in text and not any(passing in text for passing in _PASSING)


def check(options: Options) -> None:
    """Connect, create what is asked for, and check the table against the mapping."""
    try:
        conn = psycopg.connect(
            options.dsn, autocommit=True, connect_timeout=max(1, int(options.connect_timeout_s))
        )
    except psycopg.Error as exc:
        if refused_by_the_server(exc):  # a wrong password, an unknown database or role
            raise ValueError(f"{PREFIX}.dsn: cannot connect: {first_line(exc)}") from None
        # No server answered (refused, timed out, a host that does not resolve), or one that
        # is starting, stopping or full: the DSN may be right and a later start succeed.
        raise SinkUnreachable(f"{PREFIX}.dsn: cannot connect: {first_line(exc)}") from None
    with conn:
        _create(conn, positions_ddl(options), "positions_table")
        _create(conn, set_aside_ddl(options), "positions_table")
        if options.create_table:
            _create(conn, table_ddl(options), "table")
        rows = conn.execute(
            "SELECT column_name, data_type FROM information_schema.columns"
            " WHERE table_name = %s AND table_schema = coalesce(%s, current_schema())",
            (options.table, options.schema),
        ).fetchall()
    found = {str(name): str(kind) for name, kind in rows}
    if not found:
        raise ValueError(
            f"{PREFIX}.table: no table {options.table!r} in the database "
            "(create it, or set create_table = true)"
        )
    for name, kind in options.all_columns:
        key = (
            f"columns.{name}"
            if name not in (options.rest_column, options.document_column)
            else ("rest_column" if name == options.rest_column else "document_column")
        )
        if name not in found:
            raise ValueError(
                f"{PREFIX}.{key}: table {options.table!r} has no column {name!r} "
                f"(it has {', '.join(sorted(found))})"
            )
        if found[name] not in _CATALOG_NAMES[kind]:
            raise ValueError(
                f"{PREFIX}.{key}: column {name!r} is {found[name]}, not {_a(kind)} column"
            )


# One advisory lock for every daemon's start-up DDL: without it, daemons starting together
# race on CREATE TABLE IF NOT EXISTS, and PostgreSQL answers the loser with 'type "..."
# already exists' (the table's row type) or a unique violation on its catalog.
_DDL_LOCK = 0x6C6F_6768_7562_64  # "loghubd"


def _create(conn: psycopg.Connection[Any], ddl: sql.Composed, key: str) -> None:
    for attempt in range(5):
        try:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_DDL_LOCK,))
                conn.execute(ddl)
            return
        except (
            psycopg.errors.UniqueViolation,
            psycopg.errors.DuplicateTable,
            psycopg.errors.DuplicateObject,
        ) as exc:
            # Something else (not a loghubd daemon) created it between our check and insert:
            # the next IF NOT EXISTS finds it.
            if attempt == 4:
                raise ValueError(f"{PREFIX}.{key}: cannot create: {first_line(exc)}") from None
        except psycopg.Error as exc:
            raise ValueError(f"{PREFIX}.{key}: cannot create: {first_line(exc)}") from None


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
