"""Secrets and TLS (security review):

- a DSN libpq cannot parse is a configuration error (exit 2, which the unit's
  RestartPreventExitStatus keeps down), not "cannot reach" (4, restarted for ever), and its
  password is printed nowhere, though libpq quotes the DSN, or a bare piece of it;
- a session that is not encrypted, to a server that is not on this machine, is warned about
  once at start (`postgres_plaintext`), naming the host, never the password."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
import structlog
from loghubd_postgres import schema
from loghubd_postgres.failures import describe, dsn_secrets, first_line, masked
from loghubd_postgres.options import parse
from loghubd_postgres.schema import plaintext_exposed
from pg_server import PgServer
from test_postgres_sink import factory

from loghubd import SinkUnreachable
from loghubd.config import ConfigError

PASSWORD = "PlainPgPass999"
BASE = (
    '[source]\nendpoint = "http://127.0.0.1:1"\nproject = "proj"\nlogstore = "store"\n'
    '[consumer]\ngroup = "grp"\n[processor]\nname = "postgres"\n[ops]\nlisten = "127.0.0.1:0"\n'
)

# DSNs libpq cannot parse, each with the password (or a piece of it) in libpq's complaint.
UNPARSABLE = [
    f"postgresql://app:{PASSWORD}@[::1/logs",  # the review's: the whole DSN quoted
    f"postgresql://app:{PASSWORD}%zz@db/logs",  # "invalid percent-encoded token: <password>"
    f'postgresql://app:{PASSWORD}"x y@db/logs',  # "unexpected spaces found in <password>"
    f"postgresql://app@db/logs?password={PASSWORD}%zz",
    f"host=db user=app password=Plain {PASSWORD}",  # 'missing "=" after <the second word>'
    f"host=db user=app password='{PASSWORD}",  # an unterminated quote
    f"host=db user=app password={PASSWORD} dbname",
]


@pytest.mark.parametrize("dsn", UNPARSABLE)
def test_libpq_parse_errors_are_programming_errors_and_lose_the_password(dsn: str) -> None:
    """What psycopg raises for a DSN libpq cannot parse (a ProgrammingError without SQLSTATE),
    and that its message, however libpq quotes the DSN, keeps no piece of the password."""
    with pytest.raises(psycopg.ProgrammingError) as info:
        psycopg.conninfo.conninfo_to_dict(dsn)
    assert info.value.sqlstate is None
    for text in (first_line(info.value, dsn), describe(info.value, dsn)):
        assert PASSWORD not in text
        assert "PgPass" not in text


@pytest.mark.parametrize(
    ("dsn", "secrets"),
    [
        ("postgresql://app:p%40ss@db/logs", ["p%40ss", "p@ss"]),
        ("postgresql://app@[::1]:5432/logs?sslmode=require", []),  # a port, not a password
        ("postgresql://db.internal:5432/logs", []),
        ("host=db password='a b\\'c' user=app", ["'a b\\'c'", "a b'c"]),
        ("host=db user=app", []),
        ("", []),
    ],
)
def test_the_secrets_of_a_dsn(dsn: str, secrets: list[str]) -> None:
    assert sorted(dsn_secrets(dsn)) == sorted(secrets)


@pytest.mark.parametrize(
    ("text", "dsn", "expected"),
    [
        # the core's redact_text: a URL's password, a password=... pair
        ('URI: "postgresql://app:pw9@[::1/logs"', "", 'URI: "postgresql://app:***@[::1/logs"'),
        ("conninfo host=db password=pw9 user=app", "", "conninfo host=db password=*** user=app"),
        # the DSN's password wherever it is, decoded too
        ("token: 'p@ssword1'", "postgresql://app:p%40ssword1@db/logs", "token: '***'"),
        # a short piece only where quoted on its own
        ('missing "=" after "cd" in "abcd"', "host=db password=ab cd",
         'missing "=" after "***" in "abcd"'),
        # nothing else touched
        ('could not translate host name "db"', "postgresql://app:pw9@db/logs",
         'could not translate host name "db"'),
        # a password that is also a word of the message, inside another word: left there
        ("application app is down", "postgresql://u:app@db/logs", "application *** is down"),
        # what the DSN shows anyway (a dev setup's user, database and password alike)
        ('database "postgres" does not exist', "postgresql://postgres:postgres@db/postgres",
         'database "postgres" does not exist'),
    ],
)  # fmt: skip
def test_masked(text: str, dsn: str, expected: str) -> None:
    assert masked(text, dsn) == expected


@pytest.mark.parametrize("dsn", UNPARSABLE[:2])
def test_an_unparsable_dsn_is_a_problem_of_the_table(dsn: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse({"dsn": dsn, "table": "t"})
    (line,) = info.value.problems
    assert line.startswith("processor.postgres.dsn: not a DSN libpq can read: ")
    assert PASSWORD not in line


def test_the_start_check_too_says_an_unparsable_dsn_is_the_configuration() -> None:
    """Past `parse` (which checks first), a DSN the connection cannot parse is still a
    ConfigError (exit 2), masked."""
    options = parse({"dsn": "postgresql://app:x@127.0.0.1:1/db", "table": "t"})
    options = dataclasses.replace(options, dsn=UNPARSABLE[0])
    with pytest.raises(ConfigError) as info:
        schema.check(options)
    assert str(info.value).startswith("processor.postgres.dsn: cannot connect: ")
    assert PASSWORD not in str(info.value)


@pytest.mark.parametrize("dsn", [UNPARSABLE[0], UNPARSABLE[4]])
@pytest.mark.parametrize("command", ["check-config", "run"])
def test_the_cli_exits_2_on_an_unparsable_dsn_without_the_password(
    tmp_path: Path, command: str, dsn: str
) -> None:
    path = tmp_path / "c.toml"
    quoted = dsn.replace("\\", "\\\\").replace('"', '\\"')
    path.write_text(f'{BASE}[processor.postgres]\ndsn = "{quoted}"\ntable = "t"\n')
    done = subprocess.run(
        [sys.executable, "-m", "loghubd", command, "-c", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, (done.stdout[-2000:], done.stderr)
    assert "Traceback" not in done.stderr
    assert "processor.postgres.dsn: not a DSN libpq can read: " in done.stderr, done.stderr
    for out in (done.stdout, done.stderr):
        assert PASSWORD not in out
        assert "PgPass" not in out


# DSNs libpq reads, with a setting it will not use: it says so before sending anything.
UNUSABLE = [
    f"service=loghubd_no_such_service password={PASSWORD}",  # not in any pg_service.conf
    f"host=127.0.0.1 port=99999 password={PASSWORD}",
    f"host=127.0.0.1 port=1 sslmode=bogus password={PASSWORD}",
    f"host=127.0.0.1 port=1 target_session_attrs=bogus password={PASSWORD}",
    f"hostaddr=300.1.1.1 port=1 password={PASSWORD}",
    f"host=127.0.0.1,127.0.0.2 port=1,2,3 password={PASSWORD}",
]


@pytest.mark.parametrize("dsn", UNUSABLE)
def test_a_setting_libpq_will_not_use_is_the_configuration(dsn: str) -> None:
    """Read fine, refused by libpq at once: a ConfigError (exit 2), not "cannot reach" (exit
    4, restarted for ever with the same DSN); masked."""
    options = dataclasses.replace(parse({"dsn": dsn, "table": "t"}), connect_timeout_s=1)
    with pytest.raises(ConfigError) as info:
        schema.check(options)
    assert str(info.value).startswith("processor.postgres.dsn: cannot connect: ")
    assert PASSWORD not in str(info.value)


@pytest.mark.parametrize(
    "dsn",
    [
        "host=/nonexistent/loghubd-socket-dir port=5432",  # a local server not started yet
        "host=127.0.0.1 port=1",  # nobody listening
    ],
)
def test_a_server_not_there_yet_is_not_the_configuration(dsn: str) -> None:
    options = dataclasses.replace(parse({"dsn": dsn, "table": "t"}), connect_timeout_s=1)
    with pytest.raises(SinkUnreachable, match=r"processor\.postgres\.dsn: cannot connect"):
        schema.check(options)


def test_a_service_file_not_there_yet_is_not_the_configuration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A service file that is missing (on a volume mounted after the daemon starts): "cannot
    reach" (exit 4, restarted), not a refused configuration."""
    monkeypatch.setenv("PGSERVICEFILE", str(tmp_path / "not-mounted-yet" / "pg_service.conf"))
    options = dataclasses.replace(parse({"dsn": "service=logs", "table": "t"}), connect_timeout_s=1)
    with pytest.raises(SinkUnreachable, match=r"service file .* not found"):
        schema.check(options)


def test_the_cli_exits_2_on_an_unknown_service(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(f'{BASE}[processor.postgres]\ndsn = "{UNUSABLE[0]}"\ntable = "t"\n')
    done = subprocess.run(
        [sys.executable, "-m", "loghubd", "check-config", "-c", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, (done.stdout[-2000:], done.stderr)
    assert 'definition of service "loghubd_no_such_service" not found' in done.stderr
    assert "Traceback" not in done.stderr
    assert PASSWORD not in done.stdout + done.stderr


@pytest.mark.parametrize(
    ("host", "ssl", "exposed"),
    [
        ("db.internal", False, True),
        ("db.internal", True, False),
        ("10.0.0.5", False, True),
        ("2001:db8::1", False, True),
        ("127.0.0.1", False, False),
        ("127.8.9.10", False, False),  # all of 127.0.0.0/8
        ("::1", False, False),
        ("[::1]", False, False),
        ("::ffff:127.0.0.1", False, False),
        ("::ffff:10.0.0.5", False, True),
        ("localhost", False, False),
        ("LOCALHOST.", False, False),
        ("db.localhost", False, False),
        ("localhost.example.com", False, True),
        ("/var/run/postgresql", False, False),  # a Unix socket's directory
        ("@abstract", False, False),  # an abstract Unix socket
        ("", False, False),  # libpq's default: the Unix socket
        ("fe80::1%eth0", False, True),
    ],
)
def test_which_sessions_are_warned_of(host: str, ssl: bool, exposed: bool) -> None:
    assert plaintext_exposed(host, ssl) is exposed


def test_no_warning_for_the_local_test_server(pg_server: PgServer, pg_dsn: str) -> None:
    """The test server listens on 127.0.0.1 without TLS: loopback, so no warning; nor over
    its Unix socket."""
    database = pg_dsn.rsplit("/", 1)[1]
    socket = f"host={pg_server.dir} port={pg_server.port} user=postgres dbname={database}"
    for dsn in (pg_dsn, socket):
        with structlog.testing.capture_logs() as logs:
            factory(dsn)
        assert [e for e in logs if e["event"] == "postgres_plaintext"] == [], dsn


def test_the_warning_names_the_host_and_never_the_password(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As it would for a remote server (the decision forced): one warning, with the host and
    how to require TLS, and no password (the test server trusts, so a password is ignored)."""
    monkeypatch.setattr(schema, "plaintext_exposed", lambda host, ssl: not ssl)
    dsn = pg_dsn.replace("postgresql://postgres@", f"postgresql://postgres:{PASSWORD}@")
    with structlog.testing.capture_logs() as logs:
        factory(dsn)
    (warning,) = [e for e in logs if e["event"] == "postgres_plaintext"]
    assert warning["log_level"] == "warning"
    assert warning["host"] == "127.0.0.1"
    assert "sslmode=verify-full" in warning["detail"]
    assert PASSWORD not in repr(logs)


def test_the_server_says_whether_the_session_is_gssapi_encrypted(pg_dsn: str) -> None:
    """The query behind the GSSAPI check runs on a real server (PostgreSQL 12+): a session over
    TCP without GSSAPI is not encrypted by it."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert schema._gssapi_encrypted(conn) is False


def test_no_warning_for_a_gssapi_encrypted_session(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`gssencmode` encrypts the session as TLS does: a remote server reached so (the decisions
    forced: no Kerberos here) is not warned of."""
    monkeypatch.setattr(schema, "plaintext_exposed", lambda host, ssl: not ssl)
    monkeypatch.setattr(schema, "_gssapi_encrypted", lambda conn: True)
    with structlog.testing.capture_logs() as logs:
        factory(pg_dsn)
    assert [e for e in logs if e["event"] == "postgres_plaintext"] == []
