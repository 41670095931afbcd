"""The start-up check under least privilege, against a real PostgreSQL server: each case logs
in as a role made with exactly its grants (PostgreSQL 15 gives ordinary roles no CREATE on
schema public), and the check says what is missing, every problem at once, with the GRANT
to run; a role with exactly the privileges the check asks for then runs the whole sink."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
from loghubd_postgres import schema
from loghubd_postgres.factory import PostgresFactory
from loghubd_postgres.options import parse
from loghubd_postgres.rows import BadRow
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from test_postgres_sink import BAD, SHARD, batch, ids_batch, query, replay, run, sink_options

from loghubd.testing import make_context

# What the check asks of a least-privilege role (README.md, "Privileges").
LEAST = (
    "GRANT SELECT, INSERT, UPDATE ON loghubd_positions TO {role}",
    "GRANT SELECT, INSERT, UPDATE, DELETE ON loghubd_positions_set_aside TO {role}",
    "GRANT INSERT ON logs TO {role}",
)


def superuser(dsn: str, *statements: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def make_role(dsn: str, grants: tuple[str, ...]) -> tuple[str, str]:
    """(a new login role with exactly `grants`, a DSN logging in as it); roles are the
    cluster's, so it is named after this test's database."""
    role = f"r_{conninfo_to_dict(dsn)['dbname']}"
    superuser(dsn, f"CREATE ROLE {role} LOGIN", *(g.format(role=role) for g in grants))
    return role, make_conninfo(dsn, user=role)


def check_lines(dsn: str, **overrides: Any) -> list[str]:
    """The lines of the check's refusal ([] if it passes)."""
    try:
        schema.check(parse(sink_options(dsn, **overrides)))
    except ValueError as exc:
        return str(exc).splitlines()
    return []


def ddl(which: str, **overrides: Any) -> str:
    made = getattr(schema, f"{which}_ddl")(parse(sink_options("host=x", **overrides)))
    return str(made.as_string())


@dataclass(frozen=True)
class Case:
    id: str
    grants: tuple[str, ...]
    expected: tuple[str, ...]  # formatted with role, and the DDL of each table as ddl_<which>
    tables_exist: bool = True  # made beforehand by the superuser (as an owner role would)
    setup: tuple[str, ...] = ()  # more, by the superuser
    overrides: dict[str, Any] = field(default_factory=dict)


NO_CREATE = (
    'processor.postgres.{key}: cannot create table "{table}": permission denied for schema '
    "public (the role needs CREATE on schema public: GRANT CREATE ON SCHEMA public TO {role}; "
    "or create the table beforehand: {ddl})"
)
P = "processor.postgres"
RLS_LOGS = (
    "CREATE TABLE logs (id text, n bigint, ts timestamptz, rest jsonb)",
    "ALTER TABLE logs ENABLE ROW LEVEL SECURITY",
)

CASES = [
    Case(
        "F4: tables there, exactly the table privileges, no CREATE on the schema: passes",
        LEAST,
        (),
    ),
    Case(
        "tables missing, CREATE on the schema: created (the role owns them), passes",
        ("GRANT CREATE ON SCHEMA public TO {role}",),
        (),
        tables_exist=False,
    ),
    Case(
        "tables missing, create_table = true, no CREATE on the schema: each table and CREATE",
        (),
        (
            NO_CREATE.format(
                key="positions_table", table="loghubd_positions", role="{role}", ddl="{ddl_p}"
            ),
            NO_CREATE.format(
                key="positions_table",
                table="loghubd_positions_set_aside",
                role="{role}",
                ddl="{ddl_s}",
            ),
            NO_CREATE.format(key="table", table="logs", role="{role}", ddl="{ddl_t}"),
        ),
        tables_exist=False,
    ),
    Case(
        "F5: the data table there, no privilege at all on it: its privilege, never 'no table'",
        LEAST[:2],
        (
            f'{P}.table: role "{{role}}" may not INSERT into table "public"."logs"'
            " (GRANT INSERT ON public.logs TO {role})",
        ),
    ),
    Case(
        "F6: SELECT (not INSERT) on the data table",
        (*LEAST[:2], "GRANT SELECT ON logs TO {role}"),
        (
            f'{P}.table: role "{{role}}" may not INSERT into table "public"."logs"'
            " (GRANT INSERT ON public.logs TO {role})",
        ),
    ),
    Case(
        "F6: no UPDATE on the positions table",
        ("GRANT SELECT, INSERT ON loghubd_positions TO {role}", *LEAST[1:]),
        (
            f'{P}.positions_table: role "{{role}}" lacks UPDATE on table'
            ' "public"."loghubd_positions" (GRANT UPDATE ON public.loghubd_positions TO {role})',
        ),
    ),
    Case(
        "F6: no DELETE on the set-aside table, none at all on the positions table",
        ("GRANT SELECT, INSERT, UPDATE ON loghubd_positions_set_aside TO {role}", LEAST[2]),
        (
            f'{P}.positions_table: role "{{role}}" lacks SELECT, INSERT, UPDATE on table'
            ' "public"."loghubd_positions" (GRANT SELECT, INSERT, UPDATE ON'
            " public.loghubd_positions TO {role})",
            f'{P}.positions_table: role "{{role}}" lacks DELETE on table'
            ' "public"."loghubd_positions_set_aside" (GRANT DELETE ON'
            " public.loghubd_positions_set_aside TO {role})",
        ),
    ),
    Case(
        "F9: a missing column and a missing privilege, both at once",
        ("GRANT SELECT, INSERT ON loghubd_positions TO {role}", *LEAST[1:]),
        (
            f'{P}.positions_table: role "{{role}}" lacks UPDATE on table'
            ' "public"."loghubd_positions" (GRANT UPDATE ON public.loghubd_positions TO {role})',
            f"{P}.columns.status: table 'logs' has no column 'status' (it has id, n, rest, ts)",
        ),
        setup=("CREATE TABLE logs (id text, n bigint, ts timestamptz, rest jsonb)",),
        overrides={"columns": {"id": "text", "n": "bigint", "status": "integer"}},
    ),
    Case(
        "no USAGE on the data table's schema: the GRANT USAGE",
        (*LEAST[:2], "GRANT INSERT ON app.logs TO {role}"),
        (
            f'{P}.table: role "{{role}}" may not use schema "app"'
            " (GRANT USAGE ON SCHEMA app TO {role})",
        ),
        setup=("CREATE SCHEMA app", "CREATE TABLE app.logs (id text, n bigint)"),
        overrides={"table": "app.logs", "rest_column": None, "columns": {"id": "text"}},
    ),
    Case(
        "a serial column the rows leave out, no USAGE on its sequence: the GRANT",
        LEAST,
        (
            f'{P}.table: role "{{role}}" may not use sequence "public"."logs_seq_seq", which'
            " fills column 'seq' (GRANT USAGE ON SEQUENCE public.logs_seq_seq TO {role})",
        ),
        setup=("CREATE TABLE logs (seq bigserial, id text, n bigint, ts timestamptz, rest jsonb)",),
    ),
    Case(
        "a serial column with USAGE on its sequence, and an identity column: passes",
        (*LEAST, "GRANT USAGE ON SEQUENCE logs_seq_seq TO {role}"),
        (),
        setup=(
            "CREATE TABLE logs (seq bigserial, k bigint GENERATED ALWAYS AS IDENTITY,"
            " id text, n bigint, ts timestamptz, rest jsonb)",
        ),
    ),
    Case(
        "row-level security on the data table: COPY refuses it, said at start with the way out",
        LEAST,
        (
            f'{P}.table: row-level security applies to role "{{role}}" on table "public"."logs",'
            " and COPY refuses it: COPY FROM not supported with row-level security (ALTER ROLE"
            " {role} BYPASSRLS, or ALTER TABLE public.logs DISABLE ROW LEVEL SECURITY, or write"
            " as the table's owner where it is not FORCE ROW LEVEL SECURITY)",
        ),
        setup=(*RLS_LOGS, "CREATE POLICY anyone ON logs USING (true) WITH CHECK (true)"),
    ),
    Case(
        "row-level security on the data table, no policy at all (so no row may be written)",
        LEAST,
        (
            f'{P}.table: row-level security applies to role "{{role}}" on table "public"."logs",'
            " and COPY refuses it: COPY FROM not supported with row-level security (ALTER ROLE"
            " {role} BYPASSRLS, or ALTER TABLE public.logs DISABLE ROW LEVEL SECURITY, or write"
            " as the table's owner where it is not FORCE ROW LEVEL SECURITY)",
        ),
        setup=RLS_LOGS,
    ),
    Case(
        "row-level security on the data table, a role with BYPASSRLS: passes",
        (*LEAST, "ALTER ROLE {role} BYPASSRLS"),
        (),
        setup=RLS_LOGS,
    ),
    Case(
        "no USAGE on the positions tables' schema: said once for both",
        ("GRANT INSERT ON logs TO {role}",),
        (
            f'{P}.positions_table: role "{{role}}" may not use schema "app"'
            " (GRANT USAGE ON SCHEMA app TO {role})",
        ),
        setup=("CREATE SCHEMA app",),
        overrides={"positions_table": "app.pos"},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_the_check_names_what_the_role_may_not_do(pg_dsn: str, case: Case) -> None:
    superuser(pg_dsn, *case.setup)
    if case.tables_exist:  # made by their owner, whose check has the mapping's problems only
        mapping = [line for line in case.expected if ".columns." in line]
        assert check_lines(pg_dsn, **case.overrides) == mapping
    role, dsn = make_role(pg_dsn, case.grants)
    ddls = {"ddl_p": ddl("positions"), "ddl_s": ddl("set_aside"), "ddl_t": ddl("table")}
    expected = [line.format(role=role, **ddls) for line in case.expected]
    assert check_lines(dsn, **case.overrides) == expected


def test_a_role_with_exactly_the_privileges_asked_for_runs_the_whole_sink(pg_dsn: str) -> None:
    """What the check asks is enough for every statement of `sink.Statements`: a batch
    written, one refused and set aside, and its dead letter replayed."""
    assert check_lines(pg_dsn) == []  # the tables, made by their owner
    role, dsn = make_role(pg_dsn, LEAST)
    f = PostgresFactory(sink_options(dsn))
    f.bind(make_context(project="p", logstore="ls", group="g", consumer="c1"))
    assert run(f(SHARD), ids_batch(0, range(2))) == [None]
    bad = batch(1, [BAD])
    with pytest.raises(BadRow):
        run(f(SHARD), bad)
    assert len(query(pg_dsn, "SELECT * FROM loghubd_positions_set_aside")) == 1
    superuser(pg_dsn, "ALTER TABLE logs ALTER COLUMN n TYPE text")  # the operator's fix
    r = PostgresFactory(sink_options(dsn, columns={"id": "text", "n": "text"}))
    r.bind(make_context(project="p", logstore="ls", group="g", consumer="c1", replay=True))
    assert replay(r, bad).finished
    ids = sorted(row[0] for row in query(pg_dsn, "SELECT id FROM logs"))
    assert ids == ["b0", "b1", "i0", "i1"]
    assert query(pg_dsn, "SELECT tableowner FROM pg_tables WHERE tablename = 'logs'") != [(role,)]


RLS_LINE = (
    f'{P}.table: row-level security applies to role "{{role}}" on table "public"."logs", and'
    " COPY refuses it: COPY FROM not supported with row-level security ({way_out})"
)
NOT_OWNER = (
    "ALTER ROLE {role} BYPASSRLS, or ALTER TABLE public.logs DISABLE ROW LEVEL SECURITY, or"
    " write as the table's owner where it is not FORCE ROW LEVEL SECURITY"
)


def test_row_level_security_is_said_with_the_other_problems_at_once(pg_dsn: str) -> None:
    """One round of fixes: the RLS line comes with a missing privilege, not after it."""
    superuser(pg_dsn, *RLS_LOGS)
    assert check_lines(pg_dsn) == []  # the positions tables, made by their owner
    role, dsn = make_role(pg_dsn, LEAST[:2])
    assert check_lines(dsn) == [
        f'{P}.table: role "{role}" may not INSERT into table "public"."logs"'
        f" (GRANT INSERT ON public.logs TO {role})",
        RLS_LINE.format(role=role, way_out=NOT_OWNER.format(role=role)),
    ]


def test_an_owner_held_by_force_row_level_security_is_told_no_force(pg_dsn: str) -> None:
    superuser(pg_dsn, *RLS_LOGS)
    assert check_lines(pg_dsn) == []  # the positions tables, made by their owner
    role, dsn = make_role(pg_dsn, LEAST[:2])
    superuser(
        pg_dsn, f"ALTER TABLE logs OWNER TO {role}", "ALTER TABLE logs FORCE ROW LEVEL SECURITY"
    )
    way_out = (
        "ALTER TABLE public.logs NO FORCE ROW LEVEL SECURITY, or ALTER ROLE {role} BYPASSRLS,"
        " or ALTER TABLE public.logs DISABLE ROW LEVEL SECURITY"
    )
    assert check_lines(dsn) == [RLS_LINE.format(role=role, way_out=way_out.format(role=role))]
    superuser(pg_dsn, "ALTER TABLE logs NO FORCE ROW LEVEL SECURITY")
    assert check_lines(dsn) == []


def test_a_locked_table_under_row_level_security_does_not_hold_the_start(pg_dsn: str) -> None:
    """Up to PostgreSQL 18 the refusal is said without a COPY, so a lock another session
    holds on the table (a long CREATE INDEX, a LOCK TABLE) cannot make the start wait."""
    superuser(pg_dsn, *RLS_LOGS)
    assert check_lines(pg_dsn) == []  # the positions tables, made by their owner
    role, dsn = make_role(pg_dsn, LEAST)
    with psycopg.connect(pg_dsn) as holder:
        holder.execute("LOCK TABLE logs IN ACCESS EXCLUSIVE MODE")
        started = time.monotonic()
        lines = check_lines(dsn)
        took = time.monotonic() - started
    assert lines == [RLS_LINE.format(role=role, way_out=NOT_OWNER.format(role=role))]
    assert took < 10, f"the check waited {took:.1f} s on the lock"


def test_a_server_that_may_take_copy_under_rls_is_asked_with_an_empty_copy(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past PostgreSQL 18 (played here by lowering the version the check trusts) the check
    asks with an empty COPY: the server's own refusal is said; a lock it cannot get within
    `lock_timeout_s` is no answer, and the start goes on rather than wait."""
    monkeypatch.setattr(schema, "_COPY_UNDER_RLS_FROM", 0)
    superuser(pg_dsn, *RLS_LOGS)
    assert check_lines(pg_dsn) == []  # the positions tables, made by their owner
    role, dsn = make_role(pg_dsn, LEAST)
    assert check_lines(dsn) == [RLS_LINE.format(role=role, way_out=NOT_OWNER.format(role=role))]
    with psycopg.connect(pg_dsn) as holder:
        holder.execute("LOCK TABLE logs IN ACCESS EXCLUSIVE MODE")
        started = time.monotonic()
        lines = check_lines(dsn, lock_timeout_s=0.3)
        took = time.monotonic() - started
    assert lines == [], lines
    assert took < 10, f"the check waited {took:.1f} s on the lock"
    assert query(pg_dsn, "SELECT count(*) FROM logs") == [(0,)]


def test_a_view_without_an_instead_of_trigger_is_refused_and_one_with_it_is_written(
    pg_dsn: str,
) -> None:
    """COPY cannot write to a plain view ("cannot copy to view"): said at start. A view with
    an INSTEAD OF INSERT row trigger takes the rows, through the trigger."""
    superuser(
        pg_dsn,
        "CREATE TABLE stored (id text, n bigint, ts timestamptz, rest jsonb)",
        "CREATE VIEW logs AS SELECT * FROM stored",
    )
    assert check_lines(pg_dsn) == [
        f'{P}.table: "public"."logs" is a view without an INSTEAD OF INSERT trigger; COPY'
        " writes to a table, a partitioned or foreign table, or a view with an INSTEAD OF"
        " INSERT row trigger (name the table)"
    ]
    superuser(
        pg_dsn,
        "CREATE FUNCTION into_stored() RETURNS trigger LANGUAGE plpgsql AS"
        " $$BEGIN INSERT INTO stored VALUES (NEW.*); RETURN NEW; END$$",
        "CREATE TRIGGER into_stored INSTEAD OF INSERT ON logs FOR EACH ROW"
        " EXECUTE FUNCTION into_stored()",
    )
    assert check_lines(pg_dsn) == []
    f = PostgresFactory(sink_options(pg_dsn))
    f.bind(make_context(project="p", logstore="ls", group="g", consumer="c1"))
    assert run(f(SHARD), ids_batch(0, range(2))) == [None]
    assert sorted(r[0] for r in query(pg_dsn, "SELECT id FROM stored")) == ["i0", "i1"]


@pytest.mark.parametrize("table", ["loghubd_positions", "loghubd_positions_set_aside"])
def test_row_level_security_on_a_positions_table_is_refused_at_start(
    pg_dsn: str, table: str
) -> None:
    """A policy could hide a shard's position row from the role, and with it the fence that
    keeps a batch from being written twice: the check refuses, whatever the policies say."""
    assert check_lines(pg_dsn) == []  # the tables, made by their owner
    superuser(
        pg_dsn,
        f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY",
        f"CREATE POLICY anyone ON {table} USING (true) WITH CHECK (true)",
    )
    assert check_lines(pg_dsn) == []  # the owner, without FORCE: no policy applies to it
    role, dsn = make_role(pg_dsn, LEAST)
    assert check_lines(dsn) == [
        f'{P}.positions_table: row-level security applies to role "{role}" on table'
        f' "public"."{table}"; the daemon must see every position row (ALTER ROLE {role}'
        f" BYPASSRLS, or ALTER TABLE public.{table} DISABLE ROW LEVEL SECURITY, or write as"
        " the table's owner where it is not FORCE ROW LEVEL SECURITY)"
    ]
    superuser(pg_dsn, f"ALTER ROLE {role} BYPASSRLS")
    assert check_lines(dsn) == []


@pytest.mark.parametrize(
    ("declared", "mapped", "problem"),
    [
        ("character varying(255)", "text", None),
        ("character(3)", "text", None),
        ("numeric(10,2)", "numeric", None),
        ("numeric(10, 2)", "double precision", None),
        ("timestamp(3) with time zone", "timestamptz", None),
        ("timestamp(0) without time zone", "timestamptz", None),
        ("json", "jsonb", None),
        ("positive", "integer", None),  # a domain: its base type
        ("integer[]", "integer", "column 'x' is integer[], not an integer column"),
        ("varchar(20)", "bigint", "column 'x' is character varying, not a bigint column"),
    ],
)
def test_column_types_are_read_from_the_catalog_without_modifiers(
    pg_dsn: str, declared: str, mapped: str, problem: str | None
) -> None:
    superuser(
        pg_dsn,
        "CREATE DOMAIN positive AS integer CHECK (VALUE > 0)",
        f"CREATE TABLE typed (x {declared})",
    )
    lines = check_lines(pg_dsn, table="typed", columns={"x": mapped}, rest_column=None)
    assert lines == ([] if problem is None else [f"{P}.columns.x: {problem}"])


@pytest.mark.parametrize(
    ("given", "plain"),
    [
        ("character varying(255)", "character varying"),
        ("numeric(10,2)", "numeric"),
        ("timestamp(3) with time zone", "timestamp with time zone"),
        ("time(6) without time zone", "time without time zone"),
        ("character varying(8)[]", "character varying[]"),
        ("text", "text"),
    ],
)
def test_unmodified(given: str, plain: str) -> None:
    assert schema.unmodified(given) == plain


def test_what_the_check_asks_of_serial_and_identity_columns_is_enough(pg_dsn: str) -> None:
    """A serial column needs USAGE on its sequence (the check asks for it); an identity
    column needs nothing more: the role writes rows that fill both."""
    superuser(
        pg_dsn,
        "CREATE TABLE logs (seq bigserial, k bigint GENERATED ALWAYS AS IDENTITY,"
        " id text, n bigint, ts timestamptz, rest jsonb)",
    )
    assert check_lines(pg_dsn) == []  # the positions tables, made by their owner
    _role, dsn = make_role(pg_dsn, (*LEAST, "GRANT USAGE ON SEQUENCE logs_seq_seq TO {role}"))
    assert check_lines(dsn) == []
    f = PostgresFactory(sink_options(dsn))
    f.bind(make_context(project="p", logstore="ls", group="g", consumer="c1"))
    assert run(f(SHARD), ids_batch(0, range(3))) == [None]
    assert query(pg_dsn, "SELECT seq, k, id FROM logs ORDER BY seq") == [
        (1, 1, "i0"),
        (2, 2, "i1"),
        (3, 3, "i2"),
    ]
