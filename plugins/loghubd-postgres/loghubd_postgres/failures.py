"""What a failed PostgreSQL call means for the batch, by its SQLSTATE. Pure: no I/O.

psycopg's exception classes do not say it: `OperationalError` holds a lost connection, but
also a statement timeout, a deadlock, a full disk and a row too large for an index, and a
missing GRANT is a `ProgrammingError` like a syntax error. Treating every `OperationalError`
as "PostgreSQL unavailable" retried a poison row for ever under an alert that said the
database could not be reached; sending every other error to the failure policy
dead-lettered whole logstores over a missing GRANT or a short migration, as letters
`dead-letters replay` cannot write (postgres audit). So:

- `CONNECTION`: the connection is gone or the server cannot take work now (down, restarting,
  full, read-only after a failover, a session killed): reconnect and retry, for ever.
- `PASSING`: the server is there but the statement could not finish now (a lock not granted
  within `lock_timeout`, a statement timeout, a deadlock, a full disk): retry it as it is.
- `BLOCKED`: the database refuses the batch until someone changes it (a GRANT, a table or
  column put back): retry, for ever, saying what to change. Never dead-lettered: nothing is
  wrong with the rows.
- None: anything else. The rows themselves refused (data, integrity, a value too large for an
  index) are set aside for the failure policy by the caller; the rest propagates to the
  daemon's retry and failure policy.
"""

from __future__ import annotations

import enum

import psycopg


class Kind(enum.Enum):
    CONNECTION = "connection"
    PASSING = "passing"
    BLOCKED = "blocked"


# SQLSTATEs (or classes: two characters) of each kind.
_CONNECTION = {
    "08",  # connection exception
    "57P01",  # admin_shutdown (pg_terminate_backend, a fast shutdown)
    "57P02",  # crash_shutdown
    "57P03",  # cannot_connect_now (starting up)
    "57P05",  # idle_session_timeout
    "53300",  # too_many_connections
    "25006",  # read_only_sql_transaction: a standby, or a demoted primary after a failover
    "25P03",  # idle_in_transaction_session_timeout: the server closed the session
}
_PASSING = {
    "55P03",  # lock_not_available (lock_timeout)
    "57014",  # query_canceled (statement_timeout, pg_cancel_backend)
    "40",  # transaction rollback: serialization failure, deadlock
    "53",  # insufficient resources: disk full, out of memory (53300 is CONNECTION above)
    "58",  # system error (an I/O error)
}
_BLOCKED = {
    "42",  # syntax error or access rule violation: a missing GRANT, table or column
    "3F",  # invalid schema name
    "28",  # invalid authorization (a role's password or rights changed under us)
}


def kind_of(exc: BaseException) -> Kind | None:
    """The kind of a failed call, or None when retrying it here cannot help."""
    if not isinstance(exc, psycopg.Error):
        return None
    state = exc.sqlstate
    if state is None:
        # libpq's own errors carry no SQLSTATE: a connection that failed or broke.
        return Kind.CONNECTION if isinstance(exc, psycopg.OperationalError) else None
    for kind, states in ((Kind.CONNECTION, _CONNECTION), (Kind.PASSING, _PASSING)):
        if state in states or state[:2] in states:
            return kind
    if state in _BLOCKED or state[:2] in _BLOCKED:
        return Kind.BLOCKED
    return None


def condition(exc: BaseException) -> str:
    """The error's class name, e.g. `LockNotAvailable`: a label for the retries' metric."""
    return type(exc).__name__


def first_line(exc: BaseException) -> str:
    """The first line of an error's text (a libpq message runs on with the server's DETAIL),
    or its class's name when it has none."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def describe(exc: BaseException) -> str:
    """PostgreSQL's message with its DETAIL, HINT and CONTEXT on one line: the first line alone
    ("unsupported Unicode escape sequence") names no row or column; CONTEXT does."""
    if not isinstance(exc, psycopg.Error):
        return first_line(exc)
    diag = exc.diag
    parts = [diag.message_primary or first_line(exc)]
    for label, value in (
        ("DETAIL", diag.message_detail),
        ("HINT", diag.message_hint),
        ("CONTEXT", diag.context),
    ):
        if value:
            parts.append(f"{label}: {' '.join(value.split())}")
    return "; ".join(parts)
