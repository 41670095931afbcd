"""Start-up checks against the database: reachable; each table present (created only when it
is missing and ours to create); the role's privileges on each; no row-level security in the
way; the data table's columns known.

Runs once, synchronously, when the daemon builds the processor: a refusal is a `ValueError`
naming the key (`processor.postgres.dsn: cannot connect: ...`), so `loghubd run` and
`loghubd check-config` exit 2 with the reason before consuming anything. The database's
problems come together, a line each (a `ConfigError`, as the option checks raise), so one
round of GRANTs and ALTERs fixes them all. A session that crosses a network unencrypted is
said once (`postgres_plaintext`), not refused.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any, NamedTuple

import psycopg
import structlog
from psycopg import sql

from loghubd import SinkUnreachable
from loghubd.processors.options import ConfigError
from loghubd_postgres.failures import first_line
from loghubd_postgres.options import PREFIX, Options

log = structlog.get_logger("loghubd.postgres")

# What pg_catalog's format_type calls the types of TYPES, without their modifiers
# (`unmodified`): a mapped column must have one of these.
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


def copy_statement(options: Options) -> sql.Composed:
    """The COPY that writes a batch's rows (`sink.Statements.copy`, and the start-up probe)."""
    return sql.SQL("COPY {} ({}) FROM STDIN").format(
        table_name(options.schema, options.table),
        sql.SQL(", ").join(sql.Identifier(n) for n, _ in options.all_columns),
    )


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


# What libpq says, before it sends anything, of a setting in the DSN (or its service file) that
# it cannot use: the same DSN gets the same answer on every start. Not a service file that is
# missing: it may be on a volume mounted after the daemon starts (restarted, exit 4).
_UNUSABLE_SETTING = re.compile(
    r'definition of service ".*" not found'
    r"|invalid \w+ value|invalid port number|invalid integer value"
    r"|could not parse network address|could not match \d+ "
)


def unusable_setting(exc: BaseException) -> bool:
    """Whether libpq refused a connection over a setting of the DSN: an unknown `service=`, a
    value it does not take (`sslmode=bogus`, `port=99999`), host and port lists that do not
    pair up. Not a Unix socket that is missing (its server may be starting)."""
    return _UNUSABLE_SETTING.search(str(exc)) is not None


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
    """Connect, create the tables that are missing and ours to create, and check each table
    the daemon writes: the role's privileges, and the data table's columns against the
    mapping. Every problem found is raised at once (a line each, as the option checks do), so
    one round of GRANTs and ALTERs fixes them all."""
    conn = _connect(options)
    with conn:
        _warn_if_plaintext(conn)
        problems = _problems(conn, options)
    if problems:
        raise ConfigError(problems)


def _connect(options: Options) -> psycopg.Connection[Any]:
    """A connection; a server's refusal is a bad DSN (exit 2), no answer is SinkUnreachable."""
    try:
        return psycopg.connect(
            options.dsn, autocommit=True, connect_timeout=max(1, int(options.connect_timeout_s))
        )
    except psycopg.Error as exc:
        why = f"{PREFIX}.dsn: cannot connect: {first_line(exc, options.dsn)}"
        if (isinstance(exc, psycopg.ProgrammingError) and exc.sqlstate is None) or (
            unusable_setting(exc)
        ):
            # libpq could not read the DSN (`options.parse` checks it first), or cannot use a
            # setting of it: no restart helps.
            raise ConfigError([why]) from None
        if refused_by_the_server(exc):  # a wrong password, an unknown database or role
            raise ValueError(why) from None
        # No server answered (refused, timed out, a host that does not resolve), or one that
        # is starting, stopping or full: the DSN may be right and a later start succeed.
        raise SinkUnreachable(why) from None


def plaintext_exposed(host: str, ssl: bool) -> bool:
    """Whether a session to `host` (libpq's: a name, an address, or a Unix socket's directory)
    crosses a network unencrypted: not TLS, and not a Unix socket, `localhost` or a loopback
    address (127.0.0.0/8, ::1), which never leave this machine."""
    if ssl:
        return False
    name = host.strip().lower().rstrip(".")
    if not name or name.startswith(("/", "@")):  # a Unix socket (an abstract one: "@...")
        return False
    if name == "localhost" or name.endswith(".localhost"):
        return False
    try:
        address = ipaddress.ip_address(name.strip("[]").split("%")[0])
    except ValueError:
        return True  # a name: where it leads is the network's to say
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return not address.is_loopback


def _gssapi_encrypted(conn: psycopg.Connection[Any]) -> bool:
    """Whether the session is encrypted by GSSAPI (`gssencmode`, Kerberos), which protects it
    as TLS does. psycopg does not expose libpq's `PQgssEncInUse`; the server's view of this
    backend (PostgreSQL 12 and later) says it. False where the view is missing. Behind a
    pooler this is the pooler's own session to the server; poolers (pgbouncer) do not offer
    GSSAPI encryption, so there it says False and the warning stands."""
    try:
        row = conn.execute(
            "SELECT encrypted FROM pg_stat_gssapi WHERE pid = pg_backend_pid()"
        ).fetchone()
    except psycopg.Error:
        return False
    return bool(row and row[0])


def _warn_if_plaintext(conn: psycopg.Connection[Any]) -> None:
    """Log `postgres_plaintext` once, at start, when the session is not encrypted and crosses a
    network: libpq's default `sslmode=prefer` falls back to plaintext without a word (and
    never checks a certificate). TLS as libpq sees it (`PQsslInUse`): behind a pooler,
    pg_stat_ssl would describe the pooler's own connection to the server."""
    ssl = bool(conn.pgconn.ssl_in_use) or _gssapi_encrypted(conn)
    host = conn.info.host
    try:
        address = conn.info.hostaddr  # the address connected to ("" over a Unix socket)
    except psycopg.NotSupportedError:  # libpq < 12
        address = ""
    if not plaintext_exposed(host, ssl) or (address and not plaintext_exposed(address, ssl)):
        return
    log.warning(
        "postgres_plaintext",
        host=host,
        hostaddr=address or None,
        port=conn.info.port,
        detail="the connection to PostgreSQL is not encrypted: the logs cross the network in "
        "the clear, to a server nothing authenticated. To require TLS and check the server's "
        "certificate, add "
        "sslmode=verify-full and sslrootcert=/path/to/ca.pem to the DSN "
        "(`?sslmode=verify-full&sslrootcert=...` in a URI); see the plugin's README, TLS",
    )


class _Role(NamedTuple):
    """The role the DSN logs in as: its name for messages, and quoted for a GRANT."""

    name: str
    quoted: str


@dataclass(frozen=True, slots=True)
class _Table:
    """A table the daemon uses: the key that names it, and the privileges the statements of
    `sink.Statements` need on it. `ddl` is None where creating it is not ours to do."""

    key: str
    schema: str | None
    name: str
    privileges: tuple[str, ...]
    ddl: sql.Composed | None

    @property
    def ident(self) -> sql.Composable:
        return table_name(self.schema, self.name)


def _tables(options: Options) -> list[_Table]:
    """The tables `check` looks at, in the order their problems are listed."""
    schema, _, positions = options.positions_table.rpartition(".")
    return [
        # ensure: INSERT ... ON CONFLICT DO NOTHING; lock: SELECT ... FOR UPDATE (which needs
        # UPDATE too); read: SELECT; advance: UPDATE ... WHERE (which reads: SELECT).
        _Table(
            "positions_table",
            schema or None,
            positions,
            ("SELECT", "INSERT", "UPDATE"),
            positions_ddl(options),
        ),
        # replayed_in: SELECT; advance: DELETE ... WHERE; set_aside: INSERT ... ON CONFLICT DO
        # UPDATE; find_set_aside: SELECT ... FOR UPDATE; replayed: UPDATE ... WHERE.
        _Table(
            "positions_table",
            schema or None,
            f"{positions}_set_aside",
            ("SELECT", "INSERT", "UPDATE", "DELETE"),
            set_aside_ddl(options),
        ),
        # copy: COPY ... FROM STDIN, which needs INSERT only.
        _Table(
            "table",
            options.schema,
            options.table,
            ("INSERT",),
            table_ddl(options) if options.create_table else None,
        ),
    ]


def _problems(conn: psycopg.Connection[Any], options: Options) -> list[str]:
    """Every problem of the database for this configuration, a `processor.postgres.<key>: why`
    line each: one table's problem does not hide the next one's."""
    found = conn.execute("SELECT current_user, quote_ident(current_user)").fetchone()
    assert found is not None
    role = _Role(str(found[0]), str(found[1]))
    *positions, data = _tables(options)
    problems: list[str] = []
    for table in positions:
        oid, lines = _check_table(conn, table, role)
        problems += lines
        if oid is not None and _row_security_active(conn, oid):
            problems.append(_positions_hidden(conn, table, oid, role))
    oid, lines = _check_table(conn, data, role)
    problems += lines
    if oid is not None and (kind := _not_copyable(conn, oid)):
        ident, _quoted = _names(conn, oid)
        problems.append(
            f"{PREFIX}.table: {ident} is {kind}; COPY writes to a table, a partitioned or "
            "foreign table, or a view with an INSTEAD OF INSERT row trigger (name the table)"
        )
    elif oid is not None:
        columns = _column_problems(options, _columns(conn, oid))
        problems += columns
        problems += _sequence_problems(conn, data, oid, role, {n for n, _ in options.all_columns})
        if _row_security_active(conn, oid):
            problems += _copy_refused(conn, options, oid, role, not lines and not columns)
    # Both positions tables live in one schema: a schema's problem is said once.
    return list(dict.fromkeys(problems))


def _check_table(
    conn: psycopg.Connection[Any], table: _Table, role: _Role
) -> tuple[int | None, list[str]]:
    """(the table's oid if it is there, its problems): created when missing and ours to
    create, then the role's privileges on it. The table is looked up before any DDL:
    PostgreSQL checks CREATE on the schema before `IF NOT EXISTS`, so a role that may not
    create (least privilege) is refused even where the table exists."""
    if table.schema is not None and not _may_use_schema(conn, table.schema):
        schema = _quote(conn, table.schema)
        return None, [
            f"{PREFIX}.{table.key}: role {_dq(role.name)} may not use schema "
            f"{_dq(table.schema)} (GRANT USAGE ON SCHEMA {schema} TO {role.quoted})"
        ]
    oid = _oid(conn, table)
    if oid is None:
        if table.ddl is None:
            return None, [
                f"{PREFIX}.{table.key}: no table {table.name!r} in the database "
                "(create it, or set create_table = true)"
            ]
        refused = _create(conn, table, role)
        if refused is not None:
            return None, [refused]
        oid = _oid(conn, table)
        if oid is None:  # another session dropped it at once: nothing to check, try again
            return None, [
                f"{PREFIX}.{table.key}: table {table.name!r} was dropped as soon as it was "
                "created (by another session?): start again"
            ]
    return oid, _privilege_problems(conn, table, oid, role)


_RELKINDS = {"v": "a view", "m": "a materialized view", "S": "a sequence", "i": "an index"}


def _not_copyable(conn: psycopg.Connection[Any], oid: int) -> str:
    """What the relation is, when COPY FROM cannot write to it ("" when it can): a plain,
    partitioned or foreign table, or a view with an INSTEAD OF INSERT row trigger."""
    found = conn.execute(
        "SELECT c.relkind, EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgrelid = c.oid"
        "   AND t.tgtype::int & 69 = 69)"  # ROW (1) | INSERT (4) | INSTEAD (64)
        " FROM pg_class c WHERE c.oid = %s",
        (oid,),
    ).fetchone()
    if found is None:
        return ""
    kind, instead = str(found[0]), bool(found[1])
    if kind in ("r", "p", "f") or (kind == "v" and instead):
        return ""
    return _RELKINDS.get(kind, f"a relation of kind {kind!r}") + (
        " without an INSTEAD OF INSERT trigger" if kind == "v" else ""
    )


def _row_security_active(conn: psycopg.Connection[Any], oid: int) -> bool:
    """Whether row-level security policies apply to this role's statements on the table
    (enabled on it, and the role neither owns it without FORCE nor has BYPASSRLS)."""
    found = conn.execute("SELECT row_security_active(%s::oid)", (oid,)).fetchone()
    return found is not None and bool(found[0])


# The first PostgreSQL that might take COPY FROM under row-level security (a patch was
# proposed for it); every release before refuses it whenever a policy applies.
_COPY_UNDER_RLS_FROM = 190000


def _copy_refused(
    conn: psycopg.Connection[Any], options: Options, oid: int, role: _Role, privileged: bool
) -> list[str]:
    """The line saying that the batches' COPY cannot write to a table under row-level
    security, or nothing where it can. Up to PostgreSQL 18 it never can ("COPY FROM not
    supported with row-level security"): said without trying. A later server is asked with
    the daemon's own COPY carrying no row, in a transaction rolled back, waiting for locks no
    longer than `lock_timeout_s` (a lock it cannot get is no answer: nothing is said), and
    only once the role has its privileges (else the refusal would be theirs)."""
    if conn.info.server_version < _COPY_UNDER_RLS_FROM:
        why = "COPY FROM not supported with row-level security"
    elif not privileged:
        return []
    else:
        try:
            with conn.transaction(force_rollback=True):
                conn.execute(
                    "SELECT set_config('lock_timeout', %s, true)",
                    (f"{max(1, round(options.lock_timeout_s * 1000))}ms",),
                )
                with conn.cursor().copy(copy_statement(options)):
                    pass
            return []
        except (psycopg.errors.FeatureNotSupported, psycopg.errors.InsufficientPrivilege) as exc:
            why = first_line(exc)
        except (psycopg.errors.LockNotAvailable, psycopg.errors.QueryCanceled):
            return []
    ident, _quoted = _names(conn, oid)
    return [
        f"{PREFIX}.table: row-level security applies to role {_dq(role.name)} on table "
        f"{ident}, and COPY refuses it: {why} ({_rls_way_out(conn, oid, role)})"
    ]


def _positions_hidden(conn: psycopg.Connection[Any], table: _Table, oid: int, role: _Role) -> str:
    """The line for a positions table under row-level security: a policy that hides a shard's
    row from the role would break the fence that keeps rows from being written twice."""
    ident, _quoted = _names(conn, oid)
    return (
        f"{PREFIX}.{table.key}: row-level security applies to role {_dq(role.name)} on table "
        f"{ident}; the daemon must see every position row ({_rls_way_out(conn, oid, role)})"
    )


def _rls_way_out(conn: psycopg.Connection[Any], oid: int, role: _Role) -> str:
    """The statements that take row-level security out of the role's way on a table. A role
    that owns it is held only by FORCE ROW LEVEL SECURITY, so that comes first for it."""
    found = conn.execute(
        "SELECT c.relforcerowsecurity AND pg_has_role(c.relowner, 'USAGE')"
        " FROM pg_class c WHERE c.oid = %s",
        (oid,),
    ).fetchone()
    owner_forced = found is not None and bool(found[0])
    _ident, quoted = _names(conn, oid)
    ways = [f"ALTER TABLE {quoted} NO FORCE ROW LEVEL SECURITY"] if owner_forced else []
    ways += [
        f"ALTER ROLE {role.quoted} BYPASSRLS",
        f"ALTER TABLE {quoted} DISABLE ROW LEVEL SECURITY",
    ]
    way_out = ", or ".join(ways)
    if not owner_forced:
        way_out += ", or write as the table's owner where it is not FORCE ROW LEVEL SECURITY"
    return way_out


def _names(conn: psycopg.Connection[Any], oid: int) -> tuple[str, str]:
    """A table's schema-qualified name as PostgreSQL's messages show it, and as SQL spells it."""
    found = conn.execute(
        "SELECT n.nspname, c.relname, quote_ident(n.nspname) || '.' || quote_ident(c.relname)"
        " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = %s",
        (oid,),
    ).fetchone()
    assert found is not None
    schema, name, quoted = (str(v) for v in found)
    return f"{_dq(schema)}.{_dq(name)}", quoted


def _may_use_schema(conn: psycopg.Connection[Any], schema: str) -> bool:
    """False only for a schema that exists and the role may not look into (without USAGE, its
    tables are out of reach whatever their own grants); a missing schema is a missing table."""
    found = conn.execute(
        "SELECT has_schema_privilege(oid, 'USAGE') FROM pg_namespace WHERE nspname = %s",
        (schema,),
    ).fetchone()
    return found is None or bool(found[0])


def _oid(conn: psycopg.Connection[Any], table: _Table) -> int | None:
    """The table's oid, resolved as the daemon's statements will (an unqualified name through
    the search_path), or None: unlike information_schema, this sees a table the role has no
    privilege on, so such a table is reported for its privileges, not as missing."""
    found = conn.execute("SELECT to_regclass(%s)::oid", (table.ident.as_string(conn),)).fetchone()
    return None if found is None or found[0] is None else int(found[0])


def _privilege_problems(
    conn: psycopg.Connection[Any], table: _Table, oid: int, role: _Role
) -> list[str]:
    """A line naming the privileges the role lacks on the table, with the GRANT that gives
    them: without it every batch would fail at run time (and, with on_failure =
    "dead_letter", the whole logstore be dead-lettered)."""
    missing = [
        str(privilege)
        for (privilege,) in conn.execute(
            "SELECT p FROM unnest(%s::text[]) WITH ORDINALITY AS x(p, i)"
            " WHERE NOT has_table_privilege(%s::oid, p) ORDER BY i",
            (list(table.privileges), oid),
        ).fetchall()
    ]
    if not missing:
        return []
    ident, quoted = _names(conn, oid)
    privileges = ", ".join(missing)
    may_not = "may not INSERT into" if missing == ["INSERT"] else f"lacks {privileges} on"
    return [
        f"{PREFIX}.{table.key}: role {_dq(role.name)} {may_not} table {ident} "
        f"(GRANT {privileges} ON {quoted} TO {role.quoted})"
    ]


def _sequence_problems(
    conn: psycopg.Connection[Any], table: _Table, oid: int, role: _Role, filled: set[str]
) -> list[str]:
    """A line for each sequence that fills a column the rows leave out (a `serial` id) which
    the role may not use: COPY calls its nextval(), and every batch would fail on it.
    (An identity column's sequence needs no privilege of its own.)"""
    rows = conn.execute(
        # (The privilege in a CASE: a WHERE clause may be evaluated on rows the join's
        # relkind test has not removed yet, and has_sequence_privilege fails on a table.)
        "SELECT a.attname, quote_ident(n.nspname) || '.' || quote_ident(s.relname),"
        "   n.nspname, s.relname,"
        "   CASE WHEN s.relkind = 'S' THEN has_sequence_privilege(s.oid, 'USAGE') END"
        " FROM pg_attrdef d"
        " JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum"
        " JOIN pg_depend dep ON dep.classid = 'pg_attrdef'::regclass AND dep.objid = d.oid"
        "   AND dep.refclassid = 'pg_class'::regclass"
        " JOIN pg_class s ON s.oid = dep.refobjid AND s.relkind = 'S'"
        " JOIN pg_namespace n ON n.oid = s.relnamespace"
        " WHERE d.adrelid = %s ORDER BY a.attnum",
        (oid,),
    ).fetchall()
    return [
        f"{PREFIX}.{table.key}: role {_dq(role.name)} may not use sequence "
        f"{_dq(str(schema))}.{_dq(str(name))}, which fills column {str(column)!r} "
        f"(GRANT USAGE ON SEQUENCE {quoted} TO {role.quoted})"
        for column, quoted, schema, name, usable in rows
        if usable is False and str(column) not in filled
    ]


def _columns(conn: psycopg.Connection[Any], oid: int) -> dict[str, str]:
    """Column → type, as `_CATALOG_NAMES` spells it, read from pg_catalog (information_schema
    lists only the columns the role has some privilege on). A domain counts as its base type,
    as information_schema has it."""
    rows = conn.execute(
        "SELECT a.attname, format_type("
        "   CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE a.atttypid END,"
        "   CASE WHEN t.typtype = 'd' THEN t.typtypmod ELSE a.atttypmod END)"
        " FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid"
        " WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped",
        (oid,),
    ).fetchall()
    return {str(name): unmodified(str(kind)) for name, kind in rows}


_MODIFIER = re.compile(r"\(\s*\d+\s*(?:,\s*\d+\s*)?\)")


def unmodified(kind: str) -> str:
    """A type without its length / precision: "character varying(255)" → "character
    varying", "numeric(10,2)" → "numeric", "timestamp(3) with time zone" → "timestamp with
    time zone". The check is of the kind of type: a value too long or too large for the
    modifier is a row the server refuses, at run time."""
    return " ".join(_MODIFIER.sub("", kind).split())


def _column_problems(options: Options, found: dict[str, str]) -> list[str]:
    """A line for each mapped column the table lacks or has with a type that does not fit."""
    problems = []
    for name, kind in options.all_columns:
        key = (
            f"columns.{name}"
            if name not in (options.rest_column, options.document_column)
            else ("rest_column" if name == options.rest_column else "document_column")
        )
        if name not in found:
            problems.append(
                f"{PREFIX}.{key}: table {options.table!r} has no column {name!r} "
                f"(it has {', '.join(sorted(found))})"
            )
        elif found[name] not in _CATALOG_NAMES[kind]:
            problems.append(
                f"{PREFIX}.{key}: column {name!r} is {found[name]}, not {_a(kind)} column"
            )
    return problems


# One advisory lock for every daemon's start-up DDL: without it, daemons starting together
# race on CREATE TABLE IF NOT EXISTS, and PostgreSQL answers the loser with 'type "..."
# already exists' (the table's row type) or a unique violation on its catalog.
_DDL_LOCK = 0x6C6F_6768_7562_64  # "loghubd"


def _create(conn: psycopg.Connection[Any], table: _Table, role: _Role) -> str | None:
    """Create a missing table under the start-up lock; None, or the line saying why not.
    Looked up again under the lock: a daemon starting beside this one may have created it
    while the lock was awaited, and a role that may not create must not try then."""
    assert table.ddl is not None
    what = f"{PREFIX}.{table.key}: cannot create table {table.ident.as_string(conn)}"
    for attempt in range(5):
        try:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_DDL_LOCK,))
                if _oid(conn, table) is None:
                    conn.execute(table.ddl)
            return None
        except (
            psycopg.errors.UniqueViolation,
            psycopg.errors.DuplicateTable,
            psycopg.errors.DuplicateObject,
        ) as exc:
            # Something else (not a loghubd daemon) created it between our check and insert:
            # the next look finds it.
            if attempt == 4:
                return f"{what}: {first_line(exc)}"
        except psycopg.errors.InsufficientPrivilege as exc:
            return f"{what}: {first_line(exc)} ({_how_to_create(conn, table, role)})"
        except psycopg.Error as exc:
            return f"{what}: {first_line(exc)}"
    return None  # not reached: the last attempt returns


def _how_to_create(conn: psycopg.Connection[Any], table: _Table, role: _Role) -> str:
    """The two ways out of a refused CREATE TABLE: the privilege, or the table made by a role
    that has it (the DDL, to run as is; the GRANTs the next check asks for then follow)."""
    assert table.ddl is not None
    schema = table.schema
    if schema is None:  # where an unqualified CREATE TABLE goes
        found = conn.execute("SELECT current_schema()").fetchone()
        schema = None if found is None or found[0] is None else str(found[0])
    ddl = table.ddl.as_string(conn)
    if schema is None:
        return f"create the table beforehand: {ddl}"
    return (
        f"the role needs CREATE on schema {schema}: GRANT CREATE ON SCHEMA "
        f"{_quote(conn, schema)} TO {role.quoted}; or create the table beforehand: {ddl}"
    )


def _quote(conn: psycopg.Connection[Any], name: str) -> str:
    """`name` as SQL spells it: quoted only where it must be (`public`, `"Logs"`)."""
    found = conn.execute("SELECT quote_ident(%s)", (name,)).fetchone()
    assert found is not None
    return str(found[0])


def _dq(name: str) -> str:
    """A name in double quotes, as PostgreSQL's own messages show it."""
    return '"' + name.replace('"', '""') + '"'
