"""What the postgres processor does with each kind of failed call (loghubd_postgres/failures.py),
against a real PostgreSQL server, driven directly (no daemon):

- a lock held on the table past `lock_timeout_s` is said (`postgres_retry`, LockNotAvailable),
  retried, and the batch lands once when the lock goes (it used to wait without a word);
- a GRANT revoked mid-stream blocks the shard, retried and said, never set aside (it used to
  reach the failure policy: with `dead_letter`, letters the replay refuses), and the batch
  lands once after the GRANT;
- a value too large for an index is the rows' refusal (set aside, the failure policy), not
  "PostgreSQL unavailable" for ever;
- a NUL in a field bound for a jsonb column is a BadRow naming the field, not a refusal of the
  whole COPY that names no row. The SQLSTATE table itself is checked without a server."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import anyio
import psycopg
import pytest
import structlog
from loghubd_postgres import failures
from loghubd_postgres.failures import Kind
from loghubd_postgres.rows import BadRow
from loghubd_postgres.sink import RowsRefused
from psycopg import errors as pg
from test_postgres_sink import SHARD, batch, exact, factory, ids_batch, query, run, sample

from loghubd.testing import RecordingTracker


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (pg.AdminShutdown, Kind.CONNECTION),  # pg_terminate_backend, a fast shutdown
        (pg.CannotConnectNow, Kind.CONNECTION),
        (pg.TooManyConnections, Kind.CONNECTION),
        (pg.ReadOnlySqlTransaction, Kind.CONNECTION),  # a demoted primary
        (pg.IdleInTransactionSessionTimeout, Kind.CONNECTION),
        (pg.ConnectionFailure, Kind.CONNECTION),
        (psycopg.OperationalError, Kind.CONNECTION),  # libpq's own: no SQLSTATE
        (pg.LockNotAvailable, Kind.PASSING),
        (pg.QueryCanceled, Kind.PASSING),  # statement_timeout
        (pg.DeadlockDetected, Kind.PASSING),
        (pg.SerializationFailure, Kind.PASSING),
        (pg.DiskFull, Kind.PASSING),
        (pg.OutOfMemory, Kind.PASSING),
        (pg.InsufficientPrivilege, Kind.BLOCKED),
        (pg.UndefinedTable, Kind.BLOCKED),
        (pg.UndefinedColumn, Kind.BLOCKED),
        (pg.InvalidSchemaName, Kind.BLOCKED),
        (pg.ProgramLimitExceeded, None),  # a value too large for an index: the rows' fault
        (pg.CheckViolation, None),
        (pg.InvalidTextRepresentation, None),
        (psycopg.InterfaceError, None),  # our own misuse: the daemon's policy
        (ValueError, None),
    ],
)
def test_kinds(error: type[Exception], kind: Kind | None) -> None:
    assert failures.kind_of(error("x")) is kind


def retry_lines(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in logs if e["event"] == "postgres_retry"]


def test_a_lock_held_past_lock_timeout_is_said_and_retried(pg_dsn: str) -> None:
    f = factory(pg_dsn, lock_timeout_s=0.2)
    run(f(SHARD), ids_batch(0, range(2)))
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        with psycopg.connect(pg_dsn) as conn:
            conn.execute("LOCK TABLE logs IN ACCESS EXCLUSIVE MODE")
            locked.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    assert locked.wait(10)
    threading.Timer(1.5, release.set).start()
    with structlog.testing.capture_logs() as logs:
        began = time.monotonic()
        assert run(f(SHARD), ids_batch(1, range(2, 4))) == [None]
        took = time.monotonic() - began
    holder.join(10)
    retried = retry_lines(logs)
    assert retried and {e["reason"] for e in retried} == {"LockNotAvailable"}, logs
    assert retried[0]["blocked"] is False and retried[0]["sqlstate"] == "55P03"
    assert "lock timeout" in retried[0]["error"]
    assert [e["event"] for e in logs].count("postgres_retry_succeeded") == 1
    assert took >= 1.0, took  # it waited for the lock to go
    assert sample(f, "loghubd_postgres_retries_total", reason="LockNotAvailable") >= 1
    assert sample(f, "loghubd_postgres_unavailable_total") == 0
    exact(pg_dsn, 4)


def test_a_revoked_grant_blocks_the_shard_until_granted_again(pg_dsn: str) -> None:
    """Nothing is set aside (its letter could not be replayed): the batch waits, the reason
    is told to the daemon (/status, /readyz), and it lands once after the GRANT."""
    role = f"r_{uuid.uuid4().hex[:8]}"
    f = factory(pg_dsn)  # the tables, made as the superuser
    run(f(SHARD), ids_batch(0, range(2)))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"GRANT USAGE ON SCHEMA public TO {role}")
        conn.execute(
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}"
        )
    as_role = factory(psycopg.conninfo.make_conninfo(pg_dsn, user=role))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"REVOKE INSERT ON logs FROM {role}")

    def grant() -> None:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f"GRANT INSERT ON logs TO {role}")

    threading.Timer(1.5, grant).start()
    tracker = RecordingTracker()

    async def go() -> str | None:
        p = as_role(SHARD)
        await p.initialize(SHARD)
        try:
            return await p.process(ids_batch(1, range(2, 4)), tracker)
        finally:
            await p.shutdown(RecordingTracker())

    with structlog.testing.capture_logs() as logs:
        assert anyio.run(go) is None
    retried = retry_lines(logs)
    assert retried and {e["reason"] for e in retried} == {"InsufficientPrivilege"}, logs
    assert all(e["blocked"] for e in retried)
    assert tracker.problems[0].startswith("PostgreSQL refuses the batch (InsufficientPrivilege)")
    assert "permission denied for table logs" in tracker.problems[0]
    assert tracker.problems[-1] == ""  # told it is over
    assert query(pg_dsn, "SELECT count(*) FROM loghubd_positions_set_aside") == [(0,)]
    exact(pg_dsn, 4)


def test_a_value_too_large_for_its_index_is_refused_and_set_aside(pg_dsn: str) -> None:
    f = factory(pg_dsn)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE INDEX ON logs (id)")
    huge = "".join(uuid.uuid4().hex for _ in range(400))  # 12,800 characters, incompressible
    bad = batch(0, [[{"id": huge, "n": "1"}]])
    with structlog.testing.capture_logs() as logs, pytest.raises(RowsRefused, match="index row"):
        run(f(SHARD), bad)
    assert not [e for e in logs if e["event"] == "postgres_unavailable"]
    assert query(pg_dsn, "SELECT cursor FROM loghubd_positions_set_aside") == [(bad.cursor,)]


def test_a_refusal_carries_the_servers_detail(pg_dsn: str) -> None:
    f = factory(pg_dsn)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE logs ADD CONSTRAINT n_positive CHECK (n >= 0)")
    with pytest.raises(RowsRefused) as info:
        run(f(SHARD), batch(0, [[{"id": "a", "n": "-1"}]]))
    text = str(info.value)
    assert "n_positive" in text and "DETAIL: Failing row contains" in text, text
    assert "CONTEXT: COPY logs, line 1" in text, text


def test_a_nul_bound_for_jsonb_names_its_row_and_field(pg_dsn: str) -> None:
    f = factory(pg_dsn)
    bad = batch(0, [[{"id": "a", "n": "1"}, {"id": "b", "n": "2", "host": "h\x00x"}]])
    with pytest.raises(BadRow, match=r"row 1: .*NUL character in field 'host'"):
        run(f(SHARD), bad)
