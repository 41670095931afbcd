"""What the serve console reads from a real store (SQLite in a temporary directory, the
service in-process): write rates, lag in logs and seconds, the tail through SPL."""

from __future__ import annotations

import contextlib
import random
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from loghubd.console import html as H
from loghubd.console import serve_data as D
from loghubd.console import serve_pages
from loghubd.protocol import cursor as cursors
from loghubd.protocol import pb
from loghubd.server import spl
from loghubd.server.service import LogService
from loghubd.server.storage import Logstore, Storage


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def group_of(n: int, first: int, level: str = "INFO") -> bytes:
    g = pb.LogGroup(Topic="t")
    for i in range(first, first + n):
        log = g.Logs.add(Time=1_800_000_000)
        log.Contents.add(Key="id", Value=str(i))
        log.Contents.add(Key="level", Value="ERROR" if i % 5 == 0 else level)
    return g.SerializeToString()


World = tuple[LogService, D.Reader, Logstore, Clock]


@contextlib.contextmanager
def _world(
    tmp_path: Path, logstore: str, shards: int, groups: tuple[str, ...] = ()
) -> Iterator[World]:
    """A store with project `demo` and one logstore (and empty groups), the console's reader
    over it, and the service's clock."""
    clock = Clock()
    storage = Storage(tmp_path / "db.sqlite3")
    service = LogService(storage, clock)
    service.create_project("demo", "")
    service.create_logstore("demo", logstore, 30, shards)
    ls = service.logstore("demo", logstore)
    for group in groups:
        service.create_group(ls, group, 60, False)
    reader = D.Reader(service, tmp_path / "db.sqlite3")
    try:
        yield service, reader, ls, clock
    finally:
        reader.close()
        storage.close()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with _world(tmp_path, "app", 2) as made:
        yield made


@pytest.fixture
def wide(tmp_path: Path) -> Iterator[World]:
    """A logstore of 120 shards with an empty group `readers` (for the paged tables)."""
    with _world(tmp_path, "wide", 120, ("readers",)) as made:
        yield made


def test_write_rate_buckets_cover_the_last_minutes(world: tuple) -> None:  # type: ignore[type-arg]
    service, reader, ls, clock = world
    key0 = "0" * 32
    clock.now -= 100  # 100 s ago: 30 logs
    service.put(ls, group_of(30, 0), key0)
    clock.now += 100
    service.put(ls, group_of(10, 30), key0)  # now: 10 logs
    view = reader.logstore(ls, clock.now)
    steps = int(D.RATE_WINDOW_S / D.RATE_BUCKET_S)
    shard0 = view.shards[0]
    assert len(shard0.rate) == steps == len(view.rate)
    assert sum(r > 0 for r in shard0.rate) == 2
    assert shard0.rate[-1] > 0 and sum(view.shards[1].rate) == 0
    assert abs(sum(shard0.rate[:-1]) * D.RATE_BUCKET_S - 30) < 1e-6


def test_lag_in_logs_and_seconds_exact_then_estimated(world: tuple) -> None:  # type: ignore[type-arg]
    service, reader, ls, clock = world
    service.create_group(ls, "readers", 60, False)
    service.heartbeat(ls, "readers", "c1", [])
    key0 = "0" * 32
    for i in range(D.LAG_SCAN_GROUPS * 2):
        service.put(ls, group_of(3, i * 3), key0)
        clock.now += 1
    service.commit(ls, "readers", "c1", 0, cursors.from_seq(0, 10), False)
    view = reader.group(ls, "readers", clock.now)
    assert view is not None
    row = {r.shard: r for r in view.shards}[0]
    assert row.owner == "c1" and row.state == "already_alloc"
    assert row.lag_groups == 2 * D.LAG_SCAN_GROUPS - 10
    assert row.lag_estimated and row.lag_logs == 3 * row.lag_groups  # uniform groups
    assert row.lag_seconds == pytest.approx(2 * D.LAG_SCAN_GROUPS - 10)
    assert row.checkpoint_time == pytest.approx(clock.now - row.lag_seconds)
    service.commit(ls, "readers", "c1", 0, cursors.from_seq(0, 2 * D.LAG_SCAN_GROUPS - 4), False)
    row = {r.shard: r for r in reader.group(ls, "readers", clock.now).shards}[0]  # type: ignore[union-attr]
    assert (row.lag_groups, row.lag_logs, row.lag_estimated) == (4, 12, False)
    assert reader.group(ls, "nope", clock.now) is None


def test_tail_newest_first_through_spl(world: tuple) -> None:  # type: ignore[type-arg]
    service, reader, ls, _clock = world
    for i in range(10):
        service.put(ls, group_of(10, i * 10), None)  # round robin over both shards
        _clock.now += 1
    view = reader.tail(ls, 2, None, "")
    assert [log.record["id"] for log in view.logs] == [str(i) for i in range(99, 49, -1)]
    errors = reader.tail(ls, 2, None, "* | where level = 'ERROR'")
    assert [log.record["id"] for log in errors.logs] == [str(i) for i in range(95, -1, -5)]
    one = reader.tail(ls, 2, 1, "")
    assert {log.shard for log in one.logs} == {1}
    bad = reader.tail(ls, 2, None, "* | where level = ")
    assert bad.error and not bad.logs


def test_memoised_reads_match_a_fresh_reader_while_data_changes(
    world: tuple,  # type: ignore[type-arg]
) -> None:
    """The write-rate buckets and the tail are kept between refreshes; whatever is written
    between them, a refresh shows what a reader without memory reads (seeded, printed)."""
    service, reader, ls, clock = world
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    db = reader._db.execute("PRAGMA database_list").fetchone()[2]
    queries = ["", "* | where level = 'ERROR'", "* | extend n = id | project n, level"]
    for step in range(60):
        for _ in range(rng.randrange(3)):
            service.put(ls, group_of(rng.randrange(1, 8), step * 10, "INFO"), None)
        clock.now += rng.choice([0.5, 3.0, 7.0, 16.0, 40.0])
        fresh = D.Reader(service, Path(db))
        try:
            context = f"seed {seed}, step {step}"
            assert reader.logstore(ls, clock.now) == fresh.logstore(ls, clock.now), context
            for q in queries:
                for shard in (None, 1):
                    got = reader.tail(ls, 2, shard, q)
                    assert got == fresh.tail(ls, 2, shard, q), (context, q, shard)
        finally:
            fresh.close()


def test_tail_of_a_logstore_made_again_shows_the_new_logs(
    world: tuple,  # type: ignore[type-arg]
) -> None:
    service, reader, ls, clock = world
    service.put(ls, group_of(3, 0), "0" * 32)
    assert [log.record["id"] for log in reader.tail(ls, 2, None, "").logs] == ["2", "1", "0"]
    service.delete_logstore("demo", "app")
    clock.now += 1
    service.create_logstore("demo", "app", 30, 2)
    again = service.logstore("demo", "app")
    service.put(again, group_of(2, 100), "0" * 32)
    assert [log.record["id"] for log in reader.tail(again, 2, None, "").logs] == ["101", "100"]


@pytest.mark.parametrize(
    ("wanted", "number", "first", "stop"),
    [(None, 1, 0, 50), ("1", 1, 0, 50), ("3", 3, 100, 120), ("9", 3, 100, 120), ("x", 1, 0, 50)],
)
def test_a_long_shard_table_is_cut_into_pages(
    wide: tuple[LogService, D.Reader, Logstore, Clock],
    wanted: str | None,
    number: int,
    first: int,
    stop: int,
) -> None:
    service, reader, ls, clock = wide
    assert len(service.heartbeat(ls, "readers", "c1", [])) == 120
    view = reader.logstore(ls, clock.now, wanted)
    assert (view.pages.number, view.pages.count, view.pages.total) == (number, 3, 120)
    assert [r.shard.shard_id for r in view.shards] == list(range(first, stop))
    group = reader.group(ls, "readers", clock.now, wanted)
    assert group is not None and group.pages == view.pages
    assert [r.shard for r in group.shards] == list(range(first, stop))
    assert {r.owner for r in group.shards} == {"c1"}
    assert group.consumers[0].held == 120  # counted over every shard, not the page


def _tail_by_reading_every_shard(
    db: Path, ls: Logstore, shard_count: int, query: str
) -> list[tuple[int, int, int]]:
    """The tail as it was first written: `per_shard` newest groups of EVERY shard, the
    newest TAIL_SCAN_GROUPS of those, newest first (the reference for the faster read)."""
    per_shard = max(D._PER_SHARD, -(-D.TAIL_SCAN_GROUPS // shard_count))
    program = spl.compile(query) if query else None
    con = sqlite3.connect(db)
    try:
        rows = con.execute(
            "SELECT l.shard_id, l.seq, l.data FROM shards s CROSS JOIN log_groups l"
            " ON l.logstore_id = s.logstore_id AND l.shard_id = s.shard_id"
            " AND l.seq >= s.next_seq - ? AND l.seq < s.next_seq WHERE s.logstore_id = ?"
            " ORDER BY l.recv_time DESC, l.shard_id DESC, l.seq DESC LIMIT ?",
            (per_shard, ls.id, D.TAIL_SCAN_GROUPS),
        ).fetchall()
    finally:
        con.close()
    out = []
    for sid, seq, data in rows:
        records = D.flatten(bytes(data))
        for index in range(len(records) - 1, -1, -1):
            if program is None or program(records[index]) is not None:
                out.append((sid, seq, index))
                if len(out) == D.TAIL_LOGS:
                    return out
    return out


def test_the_tail_reads_few_shards_but_finds_what_reading_every_shard_finds(
    tmp_path: Path,
) -> None:
    """80 shards, groups written unevenly with equal receive times now and then (ties): the
    tail of the whole logstore is the same as reading every shard's newest groups."""
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    clock = Clock()
    db = tmp_path / "db.sqlite3"
    storage = Storage(db)
    service = LogService(storage, clock)
    service.create_project("demo", "")
    service.create_logstore("demo", "wide", 30, 80)
    ls = service.logstore("demo", "wide")
    reader = D.Reader(service, db)
    try:
        for step in range(40):
            hot = rng.sample(range(80), rng.choice([1, 3, 80]))
            for _ in range(rng.randrange(1, 40)):
                key = f"{rng.choice(hot) * (1 << 128) // 80:032x}"
                service.put(ls, group_of(rng.randrange(1, 4), rng.randrange(1000)), key)
                clock.now += rng.choice([0.0, 0.0, 0.0, 1.0])
            for query in ("", "* | where level = 'ERROR'"):
                got = [
                    (log.shard, log.seq, log.index) for log in reader.tail(ls, 80, None, query).logs
                ]
                want = _tail_by_reading_every_shard(db, ls, 80, query)
                assert got == want, f"seed {seed}, step {step}, query {query!r}"
    finally:
        reader.close()
        storage.close()


def test_the_tail_breaks_ties_of_receive_time_by_shard_then_position(tmp_path: Path) -> None:
    """70 shards, one group each, all received in the same second: the newest are the
    highest shard ids (as when every shard was read)."""
    clock = Clock()
    db = tmp_path / "db.sqlite3"
    storage = Storage(db)
    service = LogService(storage, clock)
    service.create_project("demo", "")
    service.create_logstore("demo", "ties", 30, 70)
    ls = service.logstore("demo", "ties")
    reader = D.Reader(service, db)
    try:
        for shard in range(70):
            service.put(ls, group_of(1, shard * 10 + 1), f"{shard * (1 << 128) // 70:032x}")
        got = [log.shard for log in reader.tail(ls, 70, None, "").logs]
        assert got == list(range(69, 69 - D.TAIL_LOGS, -1))
        assert [(s, q, i) for s, q, i in _tail_by_reading_every_shard(db, ls, 70, "")] == [
            (s, 0, 0) for s in got
        ]
    finally:
        reader.close()
        storage.close()


def test_the_tail_keeps_a_bounded_number_of_logs(
    world: tuple,  # type: ignore[type-arg]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    service, reader, ls, clock = world
    monkeypatch.setattr(D, "TAIL_CACHE_LOGS", 30)
    for i in range(20):
        service.put(ls, group_of(8, i * 8), None)
        clock.now += 1
    for query in ("", "* | where level = 'ERROR'", ""):
        view = reader.tail(ls, 2, None, query)
        assert [log.record["id"] for log in view.logs][:3] == ["159", "158", "157"] or query
        assert reader._tail_cached <= 30 + 8  # one group over at most (the newest is kept)
        assert reader._tail_cached == sum(len(v[1]) for v in reader._tail_cache.values())


def test_a_long_consumer_table_is_cut_into_pages_and_each_pager_keeps_the_other(
    wide: tuple[LogService, D.Reader, Logstore, Clock],
) -> None:
    """120 consumers in a group of 120 shards: the consumer table shows 50 at a time (by name),
    each with the shards it holds over the whole group; the consumer pager's links keep the
    shard page and the shard pager's links keep the consumer page."""
    service, reader, ls, clock = wide
    names = [f"c{n:03d}" for n in range(120)]
    for _ in range(3):  # joins, then the grants settle one shard per consumer
        for name in names:
            service.heartbeat(ls, "readers", name, [])
    view = reader.group(ls, "readers", clock.now, "2", consumers_page="2")
    assert view is not None
    pages = view.consumer_pages
    assert (pages.number, pages.count, pages.total) == (2, 3, 120)
    assert [c.name for c in view.consumers] == names[50:100]
    # held: over the whole group, not the page (every page together: every owned shard)
    every = [
        c
        for n in ("1", "2", "3")
        for c in reader.group(ls, "readers", clock.now, None, consumers_page=n).consumers  # type: ignore[union-attr]
    ]
    owned = [e.owner for e in service.group_view(ls, "readers").shards.values() if e.owner]
    assert [c.name for c in every] == names
    assert {c.name: c.held for c in every} == {n: owned.count(n) for n in names}
    assert sum(c.held for c in every) == len(owned) > 0
    assert [r.shard for r in view.shards] == list(range(50, 100))
    last = reader.group(ls, "readers", clock.now, None, consumers_page="9")
    assert last is not None and [c.name for c in last.consumers] == names[100:]
    html = serve_pages.group(H.Frame("/console", "loghubd serve"), view, clock.now).markup()
    assert "consumers 51 to 100 of 120" in html and "shards 51 to 100 of 120" in html
    assert "/g/readers?page=2&amp;consumers_page=3" in html  # the consumer pager's link
    assert "/g/readers?page=3&amp;consumers_page=2" in html  # the shard pager's link
    assert 'data-live="/console/p/demo/l/wide/g/readers?page=2&amp;consumers_page=2"' in html
