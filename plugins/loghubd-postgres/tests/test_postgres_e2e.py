"""Acceptance: exactly once into a real PostgreSQL through crashes of everything.

Three real daemons consume 300,000 logs (written at a steady rate while they run) into one
table. Mid-stream: one daemon is `kill -9`'d and restarted, twice; PostgreSQL itself is
`kill -9`'d and restarted once; another daemon is SIGSTOPped past the group timeout (its shards
go to the others while it sleeps) and then continued. At the end the table holds every id
exactly once, counted by PostgreSQL, and it has no unique constraint that could have hidden a
duplicate. Also: a daemon refuses a bad configuration at start, naming the key; a batch the
table refused replays into it once, through `loghubd dead-letters replay`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pg_server import PgServer

from loghubd.protocol import pb
from loghubd.testing import ServerProcess
from tests.integration.daemon_harness import TIMEOUT, Daemon, Pool, wait_until
from tests.integration.harness_toml import dump_toml

pytestmark = pytest.mark.slow

LOGSTORE = "pgsink"
GROUP = "pg-group"
COUNT = 300_000
SHARDS = 6
RATE = 25_000  # logs/s: a 12 s stream, long enough to crash things in the middle of it


def counts(dsn: str) -> tuple[int, int]:
    with psycopg.connect(dsn, connect_timeout=2) as conn:
        row = conn.execute("SELECT count(*), count(DISTINCT id) FROM logs").fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def rows(dsn: str) -> int:
    try:
        return counts(dsn)[0]
    except psycopg.OperationalError:
        return -1  # the server is being restarted


def options(dsn: str) -> dict[str, Any]:
    return {
        "dsn": dsn,
        "table": "logs",
        "create_table": True,
        "columns": {"id": "text", "logged_at": {"field": "__time__", "type": "timestamptz"}},
        "rest_column": "rest",
        "retry_initial_backoff_s": 0.1,
        "retry_max_backoff_s": 1.0,
    }


@pytest.mark.timeout(400)  # ~36 s on an idle machine; a loaded one is far slower
def test_exactly_once_through_daemon_and_postgres_crashes(
    pg_server: PgServer, pg_dsn: str, loghubd_server: ServerProcess, tmp_path: Path
) -> None:
    pool = Pool(tmp_path, loghubd_server.endpoint)
    try:
        _run(pool, pg_server, pg_dsn)
    finally:
        pool.close()


def _run(pool: Pool, pg: PgServer, dsn: str) -> None:
    pool.admin.create_logstore(LOGSTORE, SHARDS)
    producer = pool.produce(LOGSTORE, count=COUNT, rate=RATE, group_size=100, prefix="p")
    consumer = {"max_fetch_log_groups": 50}

    def daemon(name: str) -> Daemon:
        return pool.daemon(
            LOGSTORE, GROUP, name, processor="postgres",
            processor_options=options(dsn), consumer=consumer,
        )  # fmt: skip

    a, b, c = daemon("a"), daemon("b"), daemon("c")
    for d in (a, b, c):
        d.wait_ready()

    def past(n: int) -> None:
        wait_until(lambda: rows(dsn) >= n, 60, lambda: f"rows {rows(dsn)} < {n}\n{a.log_tail()}")

    past(COUNT // 10)
    a.kill()  # kill -9
    a = daemon("a").wait_ready()

    past(COUNT * 3 // 10)
    pg.kill()  # kill -9 of the postmaster, mid-COPY for some shards
    time.sleep(1.0)
    pg.start()

    past(COUNT // 2)
    a.kill()
    a = daemon("a").wait_ready()

    past(COUNT * 6 // 10)
    b.signal(signal.SIGSTOP)  # past the group timeout: its shards move to a and c
    time.sleep(TIMEOUT + 2.0)
    b.signal(signal.SIGCONT)

    producer.wait(300)
    wait_until(lambda: rows(dsn) >= COUNT, 90, lambda: f"rows {rows(dsn)}\n{c.log_tail()}")
    time.sleep(2 * TIMEOUT)  # anything still in flight (a stale consumer) would land now
    # The plugin's own series reach each daemon's /metrics (c lived through everything).
    assert c.metric("loghubd_postgres_written_rows_total") > 0, c.metrics()
    assert c.metric("loghubd_postgres_batches_total", outcome="written") > 0
    for d in (a, b, c):
        assert d.stop() == 0, d.log_tail()

    assert counts(dsn) == (COUNT, COUNT)
    # The crash of PostgreSQL was seen (and waited out) by the daemons writing at the time.
    assert sum(len(d.events("postgres_unavailable")) for d in pool.daemons) > 0
    with psycopg.connect(dsn) as conn:
        constraints = conn.execute(
            "SELECT conname FROM pg_constraint WHERE conrelid = 'logs'::regclass"
        ).fetchall()
        indexes = conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'logs'")
        assert constraints == [] and indexes.fetchall() == []
        (rest,) = conn.execute("SELECT rest FROM logs LIMIT 1").fetchone() or (None,)
        assert isinstance(rest, dict) and "id" not in rest
    # The stored positions are the ends the daemons committed as group checkpoints.
    with psycopg.connect(dsn) as conn:
        stored = dict(conn.execute("SELECT shard, cursor FROM loghubd_positions").fetchall())
    committed = {s: cp["checkpoint"] for s, cp in pool.admin.checkpoints(LOGSTORE, GROUP).items()}
    assert stored == committed


def test_bad_configuration_stops_the_daemon_at_start(pg_dsn: str, tmp_path: Path) -> None:
    config = tmp_path / "loghubd.toml"
    config.write_text(
        '[source]\nendpoint = "http://127.0.0.1:1"\nproject = "proj"\nlogstore = "logs"\n'
        '[consumer]\ngroup = "grp"\n'
        f'[processor]\nname = "postgres"\n[processor.postgres]\ndsn = "{pg_dsn}"\n'
        'table = "nosuch"\ncolumns = { id = "text" }\n'
    )
    out = subprocess.run(
        [sys.executable, "-m", "loghubd", "run", "-c", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out
    assert "processor.postgres.table: no table 'nosuch'" in out.stderr + out.stdout
    assert "Traceback" not in out.stderr + out.stdout


def test_dead_letters_replay_into_the_table_once(
    pg_dsn: str, loghubd_server: ServerProcess, tmp_path: Path
) -> None:
    """The operator's path after the table refused rows: a daemon sets the batch aside
    (`on_failure = "dead_letter"`) and goes on; the column and the mapping are fixed; `loghubd
    dead-letters replay` writes the dead letter into the table, once, however often it is run."""
    pool = Pool(tmp_path, loghubd_server.endpoint)
    try:
        pool.admin.create_logstore("refused", 1)
        groups = [[{"id": f"r{g}-{i}", "n": str(i)} for i in range(50)] for g in range(6)]
        groups[3][7]["n"] = "seven"  # group 3 does not fit a bigint column
        for group in groups:
            raw = pb.LogGroup(
                Logs=[
                    pb.Log(
                        Time=1_700_000_000,
                        Contents=[pb.Log.Content(Key=k, Value=v) for k, v in log.items()],
                    )
                    for log in group
                ]
            ).SerializeToString()
            pool.admin._run(lambda c, raw=raw: c.put_log_group("refused", raw))
        mapping = {**options(pg_dsn), "columns": {"id": "text", "n": "bigint"}}
        daemon = pool.daemon(
            "refused",
            "refused-group",
            "a",
            processor="postgres",
            processor_options=mapping,
            consumer={"max_fetch_log_groups": 1, "max_attempts": 3, "on_failure": "dead_letter"},
        ).wait_ready()
        end = pool.admin.cursor("refused", 0, "end")
        wait_until(
            lambda: (
                pool.admin.checkpoints("refused", "refused-group").get(0, {}).get("checkpoint")
                == end
            ),
            30,
            daemon.log_tail,
        )
        assert daemon.stop() == 0, daemon.log_tail()
    finally:
        pool.close()
    assert counts(pg_dsn) == (250, 250)
    (letter,) = daemon.dead_letter.glob("shard-0/*.json")
    assert "seven" in letter.read_text()

    # The fix: the column takes text now, and so does the mapping.
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE logs ALTER COLUMN n TYPE text")
    daemon.config["processor"]["postgres"]["columns"]["n"] = "text"
    daemon.config_path.write_text(dump_toml(daemon.config))

    command = [sys.executable, "-m", "loghubd", "dead-letters", "replay"]

    def replay() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*command, "-c", str(daemon.config_path)],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, **daemon.env},
        )

    first = replay()
    assert first.returncode == 0, first.stdout + first.stderr
    assert counts(pg_dsn) == (300, 300)
    assert not list(daemon.dead_letter.glob("shard-0/*.json"))
    with psycopg.connect(pg_dsn) as conn:
        noted = conn.execute(
            "SELECT rows_written, replayed_at IS NOT NULL FROM loghubd_positions_set_aside"
        ).fetchall()
    assert noted == [(50, True)]
    # Nothing left to replay; and the table did not get the rows twice.
    again = replay()
    assert again.returncode == 0, again.stdout + again.stderr
    assert counts(pg_dsn) == (300, 300)
