"""The postgres processor against a real PostgreSQL server, driven directly (no daemon): the
COPY encoding round-trips, the fence keeps two consumers of one shard from writing a range
twice, the stored position wins when it is ahead, and a server restart mid-stream loses and
doubles nothing. A refused batch is noted as set aside, and its dead letter replays once.
Bad configuration and bad rows fail with the key / the row and the reason."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterable
from typing import Any

import anyio
import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from loghubd_postgres.factory import PostgresFactory
from loghubd_postgres.rows import BadRow
from loghubd_postgres.schema import refused_by_the_server
from loghubd_postgres.sink import NotSetAside, PostgresProcessor, RowsRefused, uncovered
from pg_server import PgServer

from loghubd import Batch, BatchInterrupted, BatchRejected, ProcessorContext, SinkUnreachable
from loghubd.protocol import cursor as cursors
from loghubd.protocol import pb
from loghubd.testing import RecordingTracker, make_context

SHARD = 3


def context(consumer: str = "c1") -> ProcessorContext:
    return make_context(project="p", logstore="ls", group="g", consumer=consumer)


def batch(first: int, groups: list[list[dict[str, str]]]) -> Batch:
    """Log groups at positions first, first+1, ... of SHARD."""
    lgl = pb.LogGroupList(
        LogGroups=[
            pb.LogGroup(
                Logs=[
                    pb.Log(Time=1_700_000_000, Contents=[pb.Log.Content(Key=k, Value=v)
                                                         for k, v in log.items()])
                    for log in group
                ]
            )
            for group in groups
        ]
    )  # fmt: skip
    raw = lgl.SerializeToString()
    return Batch(
        SHARD,
        cursors.from_seq(SHARD, first),
        cursors.from_seq(SHARD, first + len(groups)),
        raw,
        len(groups),
    )


def ids_batch(first: int, ids: Iterable[int], per_group: int = 2) -> Batch:
    items = [{"id": f"i{n}", "n": str(n)} for n in ids]
    groups = [items[i : i + per_group] for i in range(0, len(items), per_group)]
    return batch(first, groups)


def sink_options(dsn: str, /, **options: Any) -> dict[str, Any]:
    """The tests' `[processor.postgres]` table; a key given as None is left out."""
    given: dict[str, Any] = {
        "dsn": dsn,
        "table": "logs",
        "create_table": True,
        "columns": {
            "id": "text",
            "n": "bigint",
            "ts": {"field": "__time__", "type": "timestamptz"},
        },
        "rest_column": "rest",
        "retry_initial_backoff_s": 0.05,
        "retry_max_backoff_s": 0.5,
        **options,
    }
    return {key: value for key, value in given.items() if value is not None}


def factory(dsn: str, /, **options: Any) -> PostgresFactory:
    f = PostgresFactory(sink_options(dsn, **options))
    f.bind(context())
    return f


def query(dsn: str, text: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(text).fetchall()


def sample(f: PostgresFactory, name: str, **labels: str) -> float:
    """A value of the processor's own series, from the registry the daemon would serve."""
    assert f.context is not None
    value = f.context.metrics_registry.get_sample_value(name, labels)
    assert value is not None, (name, labels)
    return value


def run(processor: PostgresProcessor, *batches: Batch) -> list[str | None]:
    async def go() -> list[str | None]:
        await processor.initialize(SHARD)
        try:
            return [await processor.process(b, RecordingTracker()) for b in batches]
        finally:
            await processor.shutdown(RecordingTracker())

    return anyio.run(go)


def test_rows_columns_and_rest(pg_dsn: str) -> None:
    f = factory(pg_dsn)
    assert run(f(SHARD), ids_batch(0, range(4))) == [None]
    rows = query(pg_dsn, "SELECT id, n, ts, rest FROM logs ORDER BY n")
    assert [(r[0], r[1]) for r in rows] == [("i0", 0), ("i1", 1), ("i2", 2), ("i3", 3)]
    assert rows[0][2].timestamp() == 1_700_000_000
    assert rows[0][3] == {"__topic__": "", "__source__": ""}
    (pos,) = query(pg_dsn, "SELECT cursor, position, rows_written FROM loghubd_positions")
    assert pos == (cursors.from_seq(SHARD, 2), cursors.decode(cursors.from_seq(SHARD, 2)), 4)


def test_a_stale_consumer_is_fenced_and_a_new_one_starts_from_the_table(pg_dsn: str) -> None:
    f = factory(pg_dsn)
    a, b = f(SHARD), f(SHARD)
    # a wrote [0, 2) and [2, 4); b, granted the shard from an older group checkpoint (0),
    # is sent to the stored position instead of writing again.
    assert run(a, ids_batch(0, range(4)), ids_batch(2, range(4, 8))) == [None, None]
    end = cursors.from_seq(SHARD, 4)
    assert run(b, ids_batch(0, range(4))) == [end]
    # b goes on from there; a (which lost the shard) still holds a batch starting at 2: it
    # must not write it, whatever it does next.
    assert run(b, ids_batch(4, range(8, 12))) == [None]
    assert run(a, ids_batch(2, range(4, 8))) == [cursors.from_seq(SHARD, 6)]
    # A batch that ends exactly at the stored position is already there (an unknown COMMIT
    # outcome retried): done, nothing written.
    assert run(b, ids_batch(4, range(8, 12))) == [None]
    ids = [r[0] for r in query(pg_dsn, "SELECT id FROM logs")]
    assert sorted(ids) == sorted(f"i{n}" for n in range(12)), ids
    # The same story in the series an operator sees.
    batches = "loghubd_postgres_batches_total"
    assert sample(f, batches, outcome="written") == 3
    assert sample(f, batches, outcome="table_ahead") == 2
    assert sample(f, batches, outcome="already_written") == 1
    assert sample(f, "loghubd_postgres_written_rows_total") == 12
    assert sample(f, "loghubd_postgres_transaction_duration_seconds_count") == 6
    assert sample(f, "loghubd_postgres_unavailable_total") == 0


def test_a_gap_before_the_batch_is_written(pg_dsn: str) -> None:
    """The group checkpoint ahead of the table (a dead-lettered batch, a new table)."""
    f = factory(pg_dsn)
    assert run(f(SHARD), ids_batch(0, range(2)), ids_batch(5, range(10, 12))) == [None, None]
    assert len(query(pg_dsn, "SELECT id FROM logs")) == 4


def test_postgres_restart_mid_stream_loses_and_doubles_nothing(
    pg_server: PgServer, pg_dsn: str
) -> None:
    f = factory(pg_dsn)
    p = f(SHARD)

    async def go() -> None:
        await p.initialize(SHARD)
        for i in range(10):
            batch = ids_batch(i * 2, range(i * 4, i * 4 + 4))
            if i == 4:
                await anyio.to_thread.run_sync(pg_server.kill)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(anyio.to_thread.run_sync, _start_later, pg_server)
                    outage = RecordingTracker()
                    assert await p.process(batch, outage) is None
                # The daemon was told why the batch waited (/status, /readyz), then that it
                # goes well again.
                assert outage.problems[0].startswith("PostgreSQL unavailable (1 failure(s)")
                assert outage.problems[-1] == ""
            else:
                assert await p.process(batch, RecordingTracker()) is None
        await p.shutdown(RecordingTracker())

    anyio.run(go)
    (row,) = query(pg_dsn, "SELECT count(*), count(DISTINCT id) FROM logs")
    assert row == (40, 40)
    assert sample(f, "loghubd_postgres_unavailable_total") >= 1  # it waited, and said so
    assert sample(f, "loghubd_postgres_written_rows_total") == 40


def _start_later(server: PgServer) -> None:
    import time

    time.sleep(1.0)
    server.start()


def test_bad_row_names_the_row_field_and_reason(pg_dsn: str) -> None:
    f = factory(pg_dsn)
    bad = batch(0, [[{"id": "a", "n": "1"}, {"id": "b", "n": "twelve"}]])
    with pytest.raises(BadRow) as info:
        run(f(SHARD), bad)
    text = str(info.value)
    assert "row 1" in text and "'n'" in text and "twelve" in text and "bigint" not in text
    assert '"id": "b"' in text
    assert query(pg_dsn, "SELECT count(*) FROM logs") == [(0,)]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"columns": {"nope": "text"}, "create_table": False},
            "columns.nope: table 'logs' has no column 'nope'",
        ),
        (
            {"table": "missing", "create_table": False, "columns": {"id": "text"}},
            "table: no table 'missing'",
        ),
        (
            {"dsn": "postgresql://postgres@127.0.0.1:1/x"},  # no server there: see below
            "dsn: cannot connect",
        ),
        (
            {"columns": {"id": "varchar2"}},
            "columns.id: expected a column type (one of bigint, bool, boolean, date, double, "
            "double precision, int, integer, jsonb, numeric, real, smallint, text, timestamp "
            "with time zone, timestamptz), got a string 'varchar2'",
        ),
        ({"colums": {}}, "colums: unknown key"),
    ],
)
def test_bad_configuration_names_the_key(
    pg_dsn: str, options: dict[str, Any], message: str
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS logs (id text, n bigint)")
    with pytest.raises((ValueError, SinkUnreachable), match=r"processor\.postgres\.") as info:
        factory(pg_dsn, **options)
    assert message in str(info.value)


def test_a_database_that_does_not_answer_is_unreachable_one_that_refuses_is_a_bad_dsn(
    pg_server: PgServer, pg_dsn: str
) -> None:
    """Nobody at the port: `SinkUnreachable` (`run` exits 4, which systemd restarts: the DSN
    may be right and the database on its way). A server that answers no (an unknown database
    or role): the DSN is wrong (ValueError, exit 2)."""
    with pytest.raises(SinkUnreachable, match=r"processor\.postgres\.dsn: cannot connect"):
        factory("postgresql://postgres@127.0.0.1:1/x")
    for wrong in (pg_dsn.rsplit("/", 1)[0] + "/nosuchdb", pg_dsn.replace("postgres@", "nobody@")):
        with pytest.raises(ValueError, match="does not exist") as info:
            factory(wrong)
        assert not isinstance(info.value, SinkUnreachable)


@pytest.mark.parametrize(
    ("text", "refused"),
    [
        ('connection to server at "h", port 5 failed: FATAL:  password authentication failed '
         'for user "u"', True),
        ('connection to server at "h", port 5 failed: FATAL:  database "x" does not exist', True),
        ('connection to server at "h", port 5 failed: Connection refused', False),
        ("failed to resolve host 'nohost.invalid': [Errno -2] Name or service not known", False),
        ('connection to server at "h", port 5 failed: timeout expired', False),
        ('connection to server at "h", port 5 failed: FATAL:  the database system is starting '
         "up", False),
        ('connection to server at "h", port 5 failed: FATAL:  sorry, too many clients already',
         False),
    ],
)  # fmt: skip
def test_which_failed_connections_a_restart_may_cure(text: str, refused: bool) -> None:
    assert refused_by_the_server(Exception(text)) is refused


def test_daemons_starting_together_all_get_the_tables(pg_server: PgServer, worker_id: str) -> None:
    """Several daemons start at once against a database without the tables: every one of them
    starts (CI once saw the loser of CREATE TABLE IF NOT EXISTS refused with 'type
    "loghubd_positions" already exists')."""
    for round_ in range(4):
        dsn = pg_server.create_database(f"race_{worker_id}_{round_}")
        errors = _start_together(dsn, starters=6)
        assert not errors, f"round {round_}: {errors}"
        assert query(dsn, "SELECT count(*) FROM logs") == [(0,)]
        assert query(dsn, "SELECT count(*) FROM loghubd_positions") == [(0,)]


def _start_together(dsn: str, starters: int) -> list[BaseException]:
    gate = threading.Barrier(starters)
    errors: list[BaseException] = []

    def start() -> None:
        gate.wait(timeout=30)
        try:
            factory(dsn)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(starters)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return errors


_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))


@settings(max_examples=60)
@given(values=st.lists(st.tuples(_text, _text), min_size=1, max_size=5))
def test_copy_round_trips_any_text(pg_server: PgServer, values: list[tuple[str, str]]) -> None:
    dsn = pg_server.dsn_for("roundtrip")
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname='roundtrip'").fetchall():
            conn.execute("CREATE DATABASE roundtrip")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS logs")
        conn.execute("DROP TABLE IF EXISTS loghubd_positions")
    f = factory(dsn, columns={"a": "text"}, rest_column="rest")
    logs = [{"a": a, "b": b} for a, b in values]
    run(f(SHARD), batch(0, [logs]))
    rows = query(dsn, "SELECT a, rest FROM logs")
    got = [(a, rest["b"]) for a, rest in rows]
    assert sorted(got) == sorted(values), json.dumps(values)


def test_a_stop_while_postgres_is_down_interrupts_the_batch(
    pg_server: PgServer, pg_dsn: str
) -> None:
    """The shard stops (shutdown, rebalance) while PostgreSQL is down: the processor gives
    the batch up at once (`BatchInterrupted`) instead of retrying until the daemon abandons
    it. Nothing of it was written; the next attempt, once the server is back, writes it once."""
    f = factory(pg_dsn, retry_initial_backoff_s=5.0, retry_max_backoff_s=30.0)
    p = f(SHARD)
    tracker = RecordingTracker()

    async def stop_soon() -> None:
        await anyio.sleep(1.0)  # the first reconnect fails at once; the next is 2.5-5 s away
        tracker.stopping.set()

    async def go() -> None:
        await p.initialize(SHARD)
        assert await p.process(ids_batch(0, range(4)), RecordingTracker()) is None
        await anyio.to_thread.run_sync(pg_server.kill)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(stop_soon)
                with anyio.fail_after(20), pytest.raises(BatchInterrupted, match="unavailable"):
                    await p.process(ids_batch(2, range(4, 8)), tracker)
        finally:
            await anyio.to_thread.run_sync(pg_server.start)
        assert not tracker.finished
        assert await p.process(ids_batch(2, range(4, 8)), RecordingTracker()) is None
        await p.shutdown(RecordingTracker())

    anyio.run(go)
    assert sample(f, "loghubd_postgres_unavailable_total") >= 1  # it was retrying
    (row,) = query(pg_dsn, "SELECT count(*), count(DISTINCT id) FROM logs")
    assert row == (8, 8)


def replayer(dsn: str) -> PostgresFactory:
    """The factory as `loghubd dead-letters replay` binds it, after the operator fixed the
    mapping (`n` is text now: "twelve" fits)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE logs ALTER COLUMN n TYPE text")
    f = factory(dsn, columns={"id": "text", "n": "text"})
    f.bind(make_context(project="p", logstore="ls", group="g", consumer="c1", replay=True))
    return f


def replay(f: PostgresFactory, b: Batch) -> RecordingTracker:
    tracker = RecordingTracker()

    async def go() -> None:
        p = f(SHARD)
        await p.initialize(SHARD)
        try:
            assert await p.process(b, tracker) is None
        finally:
            await p.shutdown(RecordingTracker())

    anyio.run(go)
    return tracker


BAD = [{"id": "b0", "n": "twelve"}, {"id": "b1", "n": "13"}]


def test_a_refused_batch_is_noted_and_its_dead_letter_replays_once(pg_dsn: str) -> None:
    f = factory(pg_dsn)
    good, bad, after = ids_batch(0, range(2)), batch(1, [BAD]), ids_batch(2, range(10, 12))
    assert run(f(SHARD), good) == [None]
    with pytest.raises(BadRow):
        run(f(SHARD), bad)
    assert run(f(SHARD), after) == [None]  # the shard went on (the batch was dead-lettered)
    (note,) = query(
        pg_dsn,
        "SELECT start_position, end_position, cursor, error, replayed_at"
        " FROM loghubd_positions_set_aside",
    )
    assert note[:3] == (cursors.decode(bad.cursor), cursors.decode(bad.next_cursor), bad.cursor)
    assert "twelve" in note[3] and note[4] is None

    r = replayer(pg_dsn)
    assert replay(r, bad).finished
    assert replay(r, bad).finished  # again (an answer lost): done, nothing written twice
    ids = sorted(row[0] for row in query(pg_dsn, "SELECT id FROM logs"))
    assert ids == ["b0", "b1", "i0", "i1", "i10", "i11"], ids
    batches = "loghubd_postgres_batches_total"
    assert sample(r, batches, outcome="replayed") == 1
    assert sample(r, batches, outcome="already_replayed") == 1
    # The stored position is where the shard got to, not moved back by the replay.
    (pos,) = query(pg_dsn, "SELECT cursor FROM loghubd_positions")
    assert pos == (after.next_cursor,)

    # A batch that was never set aside is not written by a replay.
    with pytest.raises(NotSetAside, match="not noted as set aside"):
        replay(r, good)
    assert len(query(pg_dsn, "SELECT id FROM logs")) == 6


def test_a_range_written_in_order_after_all_is_not_replayed(pg_dsn: str) -> None:
    """Refused, then retried and written once the mapping was fixed (on_failure = "retry"):
    the note is dropped with that write, so a dead letter of the range (another daemon's,
    with on_failure = "dead_letter") is refused rather than written twice."""
    bad = batch(0, [BAD])
    with pytest.raises(BadRow):
        run(factory(pg_dsn)(SHARD), bad)
    assert len(query(pg_dsn, "SELECT * FROM loghubd_positions_set_aside")) == 1
    r = replayer(pg_dsn)
    fixed = factory(pg_dsn, columns={"id": "text", "n": "text"})
    assert run(fixed(SHARD), bad) == [None]
    assert query(pg_dsn, "SELECT * FROM loghubd_positions_set_aside") == []
    with pytest.raises(NotSetAside):
        replay(r, bad)
    assert query(pg_dsn, "SELECT count(*), count(DISTINCT id) FROM logs") == [(2, 2)]


def test_rows_the_server_refuses_are_rejected_at_once_and_noted(pg_dsn: str) -> None:
    """A constraint of the table (here CHECK (n >= 0)) refuses a row: the same rows fail the
    same way every time, so the batch is a `BatchRejected` (the failure policy at once, no
    retries), nothing of it is in the table, and its range is noted for a replay."""
    f = factory(pg_dsn)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE logs ADD CONSTRAINT n_positive CHECK (n >= 0)")
    bad = batch(0, [[{"id": "a", "n": "1"}, {"id": "b", "n": "-5"}]])
    with pytest.raises(RowsRefused, match="n_positive") as info:
        run(f(SHARD), bad)
    assert isinstance(info.value, BatchRejected)
    assert f"cursor {bad.cursor}" in str(info.value)
    assert query(pg_dsn, "SELECT count(*) FROM logs") == [(0,)]
    assert query(pg_dsn, "SELECT cursor FROM loghubd_positions_set_aside") == [(bad.cursor,)]


BAD2 = [{"id": "c0", "n": "fourteen"}, {"id": "c1", "n": "15"}]


def refuse(f: PostgresFactory, *bad: Batch) -> None:
    """Each batch refused (a `BadRow`) and noted, as the live daemon meets them."""
    for b in bad:
        with pytest.raises(BadRow):
            run(f(SHARD), b)


def notes(dsn: str) -> list[tuple[Any, ...]]:
    return query(
        dsn,
        "SELECT start_position - 4000000000000000, end_position - 4000000000000000,"
        " replayed_at IS NOT NULL FROM loghubd_positions_set_aside ORDER BY start_position",
    )


def exact(dsn: str, expected: int) -> None:
    assert query(dsn, "SELECT count(*), count(DISTINCT id) FROM logs") == [(expected, expected)]


def test_a_replayed_range_read_again_in_order_is_not_written_again(pg_dsn: str) -> None:
    """The daemon dead-letters [1,2) and dies before its checkpoint passes it; the operator
    fixes the mapping and replays the letter; the daemon, restarted with the fix, reads [1,2)
    again: its rows are in the table already, so it moves past them and writes what follows."""
    f = factory(pg_dsn)
    good, bad, after = ids_batch(0, range(2)), batch(1, [BAD]), ids_batch(2, range(10, 12))
    run(f(SHARD), good)
    refuse(f, bad)
    r = replayer(pg_dsn)
    assert replay(r, bad).finished
    fixed = factory(pg_dsn, columns={"id": "text", "n": "text"})
    assert run(fixed(SHARD), bad, after) == [None, None]
    exact(pg_dsn, 6)
    assert query(pg_dsn, "SELECT cursor FROM loghubd_positions") == [(after.next_cursor,)]
    assert sample(fixed, "loghubd_postgres_batches_total", outcome="skipped_replayed") == 1
    assert notes(pg_dsn) == [(1, 2, True)]  # kept: replaying the letter again writes nothing
    assert replay(r, bad).finished
    exact(pg_dsn, 6)


@pytest.mark.parametrize(
    ("replayed", "batches", "answers"),
    [
        # [1,2) replayed: the batch [1,3) skips it and is read again from 2
        ("first", [(1, [BAD, BAD2]), (2, [BAD2])], [cursors.from_seq(SHARD, 2), None]),
        # [2,3) replayed: the batch [1,3) writes [1,2) only
        ("second", [(1, [BAD, BAD2])], [None]),
        # both replayed: [1,2) skipped, then [2,3) skipped
        ("both", [(1, [BAD, BAD2]), (2, [BAD2])], [cursors.from_seq(SHARD, 2), None]),
    ],
)
def test_a_batch_overlapping_replayed_ranges_writes_only_the_rest(
    pg_dsn: str,
    replayed: str,
    batches: list[tuple[int, list[list[dict[str, str]]]]],
    answers: list[str | None],
) -> None:
    """Two ranges noted, [1,2) and [2,3), some replayed; then the daemon reads [1,3) in ONE
    batch (pull sizes differ after a restart): each row lands once."""
    f = factory(pg_dsn)
    run(f(SHARD), ids_batch(0, range(2)))
    first, second = batch(1, [BAD]), batch(2, [BAD2])
    refuse(f, first, second)
    r = replayer(pg_dsn)
    for b in {"first": [first], "second": [second], "both": [first, second]}[replayed]:
        assert replay(r, b).finished
    fixed = factory(pg_dsn, columns={"id": "text", "n": "text"})
    assert run(fixed(SHARD), *(batch(at, groups) for at, groups in batches)) == answers
    exact(pg_dsn, 6)
    assert query(pg_dsn, "SELECT cursor FROM loghubd_positions") == [(second.next_cursor,)]
    # the ranges written in order lose their notes; the replayed ones keep theirs
    kept = [(1, 2, True)] if replayed in ("first", "both") else []
    kept += [(2, 3, True)] if replayed in ("second", "both") else []
    assert notes(pg_dsn) == kept


def test_an_in_order_write_drops_every_note_it_covers(pg_dsn: str) -> None:
    """Notes at [1,2) and [2,3); the fixed daemon writes [1,3) as one batch: both notes go,
    so neither dead letter can be replayed into rows that are there already."""
    f = factory(pg_dsn)
    first, second = batch(1, [BAD]), batch(2, [BAD2])
    refuse(f, first, second)
    assert notes(pg_dsn) == [(1, 2, False), (2, 3, False)]
    r = replayer(pg_dsn)  # the mapping fixed
    fixed = factory(pg_dsn, columns={"id": "text", "n": "text"})
    assert run(fixed(SHARD), batch(1, [BAD, BAD2])) == [None]
    assert notes(pg_dsn) == []
    for b in (first, second):
        with pytest.raises(NotSetAside):
            replay(r, b)
    exact(pg_dsn, 4)


def test_a_replayed_range_inside_a_batch_whose_groups_cannot_be_placed_is_rejected(
    pg_dsn: str,
) -> None:
    """A source with an SPL query can drop whole log groups, so a batch's groups no longer
    map to positions: with a replayed range beginning inside it, nothing is written and the
    failure policy decides, with the reason."""
    f = factory(pg_dsn)
    run(f(SHARD), ids_batch(0, range(2)))
    second = batch(2, [BAD2])
    refuse(f, batch(1, [BAD]), second)
    assert replay(replayer(pg_dsn), second).finished
    fixed = factory(pg_dsn, columns={"id": "text", "n": "text"})
    spanning = batch(1, [BAD])  # [1,3) read, one group left by the query
    filtered = Batch(SHARD, spanning.cursor, second.next_cursor, spanning.raw, 1)
    with pytest.raises(BatchRejected, match="cannot be placed"):
        run(fixed(SHARD), filtered)
    exact(pg_dsn, 4)


def test_a_call_stuck_when_the_shard_stops_is_given_up(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The position row is locked by another session that never lets go (a stuck peer; the
    same for a black-holed network): once the shard stops, the write is given up after
    `STOP_PATIENCE_S` rather than holding the daemon until its grace ends. Nothing of it is
    committed; written later, it lands once."""
    from loghubd_postgres import sink

    monkeypatch.setattr(sink, "STOP_PATIENCE_S", 0.5)
    f = factory(pg_dsn)
    run(f(SHARD), ids_batch(0, range(2)))
    tracker = RecordingTracker()
    held = psycopg.connect(pg_dsn)
    try:
        held.execute("SELECT * FROM loghubd_positions FOR UPDATE")

        async def go() -> float:
            p = f(SHARD)
            await p.initialize(SHARD)
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(lambda: _stop_after(tracker, 0.5))
                    began = anyio.current_time()
                    with anyio.fail_after(20), pytest.raises(BatchInterrupted, match="stop"):
                        await p.process(ids_batch(1, range(2, 4)), tracker)
                    return anyio.current_time() - began
            finally:
                await p.shutdown(RecordingTracker())

        took = anyio.run(go)
    finally:
        held.close()
    assert 0.9 <= took < 10, took  # the stop at 0.5 s, then the patience of 0.5 s
    assert not tracker.finished
    exact(pg_dsn, 2)
    assert run(f(SHARD), ids_batch(1, range(2, 4))) == [None]
    exact(pg_dsn, 4)


async def _stop_after(tracker: RecordingTracker, seconds: float) -> None:
    await anyio.sleep(seconds)
    tracker.stopping.set()


@pytest.mark.parametrize(
    ("covered", "runs"),
    [
        ([], [(1, 5)]),
        ([(1, 5)], []),
        ([(0, 9)], []),
        ([(2, 3)], [(1, 2), (3, 5)]),
        ([(0, 2), (4, 9)], [(2, 4)]),
        ([(3, 4), (1, 2)], [(2, 3), (4, 5)]),  # any order
        ([(2, 4), (3, 6)], [(1, 2)]),  # overlapping each other
        ([(7, 9)], [(1, 5)]),  # outside
    ],
)
def test_uncovered_runs(covered: list[tuple[int, int]], runs: list[tuple[int, int]]) -> None:
    assert uncovered(1, 5, covered) == runs


def test_a_replay_committing_while_an_in_order_write_waits_is_seen(pg_dsn: str) -> None:
    """The replay of [1,2) holds the position row lock (its rows copied, its note marked)
    when the restarted daemon reads [1,2) in order and waits for that lock. Once the replay
    commits, the in-order write sees it (its notes are read after the lock, with a snapshot
    of their own) and writes nothing of the range again."""
    f = factory(pg_dsn)
    run(f(SHARD), ids_batch(0, range(2)))
    bad = batch(1, [BAD])
    refuse(f, bad)
    replaying = replayer(pg_dsn)(SHARD)
    in_order = factory(pg_dsn, columns={"id": "text", "n": "text"})(SHARD)
    copy = replaying._copy

    async def slow_copy(conn: Any, b: Batch) -> int:
        rows = await copy(conn, b)
        await anyio.sleep(1.0)  # the replay holds the lock a while after its COPY
        return rows

    replaying._copy = slow_copy  # type: ignore[method-assign]

    async def go() -> None:
        await replaying.initialize(SHARD)
        await in_order.initialize(SHARD)

        async def read_again() -> None:
            await anyio.sleep(0.3)  # the replay has the lock by now
            assert await in_order.process(bad, RecordingTracker()) is None

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(read_again)
                assert await replaying.process(bad, RecordingTracker()) is None
        finally:
            await replaying.shutdown(RecordingTracker())
            await in_order.shutdown(RecordingTracker())

    anyio.run(go)
    exact(pg_dsn, 4)
    assert query(pg_dsn, "SELECT cursor FROM loghubd_positions") == [(bad.next_cursor,)]


def test_a_letter_overlapping_a_replayed_one_writes_only_the_rest(pg_dsn: str) -> None:
    """[1,2) and [2,3) refused and noted; [2,3) replayed. The daemon, restarted before its
    checkpoint passed them and still with the old mapping, reads [1,3) in one batch: refused
    again, noted whole, dead-lettered whole. Replaying that letter writes [1,2) only."""
    f = factory(pg_dsn)
    run(f(SHARD), ids_batch(0, range(2)))
    first, second = batch(1, [BAD]), batch(2, [BAD2])
    refuse(f, first, second)
    r = replayer(pg_dsn)
    assert replay(r, second).finished
    spanning = batch(1, [BAD, BAD2])
    refuse(f, spanning)  # the old mapping (made before the fix) refuses it again
    assert replay(r, spanning).finished
    exact(pg_dsn, 6)
    assert notes(pg_dsn) == [(1, 3, True), (2, 3, True)]


def test_letters_of_two_lives_with_other_boundaries_land_once(pg_dsn: str) -> None:
    """Before a crash the daemon refused [1,2) and [2,4); after it, with other pull sizes,
    [1,3) (which replaces the note [1,2), being un-replayed). Every letter is replayed: the
    rows of [1,4) land once, whichever letters can still be placed."""
    f = factory(pg_dsn)
    run(f(SHARD), ids_batch(0, range(2)))
    third = [{"id": "d0", "n": "x"}]
    life1 = [batch(1, [BAD]), batch(2, [BAD2, third])]
    life2 = batch(1, [BAD, BAD2])
    refuse(f, *life1, life2)
    r = replayer(pg_dsn)
    for letter in (*life1, life2):
        with contextlib.suppress(NotSetAside):  # [1,2)'s note was replaced by [1,3)'s
            replay(r, letter)
    exact(pg_dsn, 7)
