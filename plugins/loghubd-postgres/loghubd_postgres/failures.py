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
import re
from urllib.parse import unquote

import psycopg

from loghubd.config.redact import MASK, redact_text


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


def first_line(exc: BaseException, dsn: str = "") -> str:
    """The first line of an error's text (a libpq message runs on with the server's DETAIL),
    or its class's name when it has none; secrets masked (`masked`)."""
    text = str(exc).strip()
    return masked(text.splitlines()[0], dsn) if text else type(exc).__name__


def describe(exc: BaseException, dsn: str = "") -> str:
    """PostgreSQL's message with its DETAIL, HINT and CONTEXT on one line: the first line alone
    ("unsupported Unicode escape sequence") names no row or column; CONTEXT does. Secrets
    masked (`masked`)."""
    if not isinstance(exc, psycopg.Error):
        return first_line(exc, dsn)
    diag = exc.diag
    parts = [diag.message_primary or first_line(exc)]
    for label, value in (
        ("DETAIL", diag.message_detail),
        ("HINT", diag.message_hint),
        ("CONTEXT", diag.context),
    ):
        if value:
            parts.append(f"{label}: {' '.join(value.split())}")
    return masked("; ".join(parts), dsn)


def masked(text: str, dsn: str = "") -> str:
    """`text` with the secrets it may quote masked: the core's `redact_text` (a URL's password,
    a `password=...` pair), then the DSN's password wherever it appears, whole, decoded or in
    pieces. libpq's complaints about a DSN it cannot parse quote a piece of it bare
    (`invalid percent-encoded token: "pa%zzss"`, `missing "=" after "word2"` of an unquoted
    `password=word1 word2`), which no shape of text gives away: only the DSN can."""
    text = redact_text(text)
    secrets = dsn_secrets(dsn)
    pieces = {piece for secret in secrets for piece in _PIECES.split(secret) if piece}
    # What the DSN shows anyway (a dev setup's `postgres:postgres@db/postgres`): masking it
    # would hide `database "postgres"` and tell nothing that the user name does not.
    shown = _shown_names(dsn)
    # Longest first: a piece masked first would leave the rest of a longer one showing.
    for secret in sorted({*secrets, *pieces} - shown, key=len, reverse=True):
        if len(secret) >= _SHORTEST:  # as a word of its own, not inside another
            text = re.sub(rf"(?<!\w){re.escape(secret)}(?!\w)", MASK, text)
        else:  # too short to mask everywhere: only where quoted on its own
            text = re.sub(rf"""(["']){re.escape(secret)}\1""", rf"\1{MASK}\1", text)
    return text


def _shown_names(dsn: str) -> set[str]:
    """The user, database and host names of `dsn` (what a message may name plainly)."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn) if dsn else {}
    except psycopg.Error:
        return set()
    return {str(info[k]) for k in ("user", "dbname", "host") if info.get(k)}


# Where libpq's parser cuts a DSN (spaces, quotes, `=`, percent-escapes): a piece of a password
# it quotes runs between two of these. Shorter pieces are masked only when quoted on their own.
_PIECES = re.compile(r"""[\s"'=\\]+|%[0-9A-Fa-f]{2}""")
_SHORTEST = 3
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_KEY = re.compile(r"(?i)(?:^|\s)password\s*=\s*")
_NEXT_KEY = re.compile(r"\s+\w+\s*=")


def dsn_secrets(dsn: str) -> list[str]:
    """The password of `dsn` as written and as meant (percent-decoded, unquoted), longest
    first; for a DSN libpq cannot parse, everything that may be part of it: a URI's user
    information after the first `:` up to the last `@`, and a `password=` value up to the
    next `key=` (an unquoted value with a space in it is two words to libpq)."""
    found: set[str] = set()
    try:
        password = psycopg.conninfo.conninfo_to_dict(dsn).get("password") if dsn else None
    except psycopg.Error:
        password = None
    if password:
        found.add(str(password))
    if _URI.match(dsn):
        start = dsn.index("://") + 3
        at = dsn.rfind("@")
        colon = dsn.find(":", start, at) if at > start else -1
        if colon >= 0 and not any(c in dsn[start:colon] for c in "/[?#"):  # not a port's
            found.add(dsn[colon + 1 : at])
        query = dsn.find("?")
        for pair in dsn[query + 1 :].split("&") if query >= 0 else ():
            name, _, value = pair.partition("=")
            if unquote(name).strip().lower() == "password":
                found.add(value)
    else:
        for m in _KEY.finditer(dsn):
            rest = dsn[m.end() :]
            following = _NEXT_KEY.search(rest)
            found.add((rest[: following.start()] if following else rest).strip())
    found |= {unquote(s) for s in found}
    return sorted((s for s in found if s), key=len, reverse=True)
