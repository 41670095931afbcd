"""What the serve console reads from a real store (SQLite in a temporary directory, the
service in-process): write rates, lag in logs and seconds, the tail through SPL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from loghubd.console import serve_data as D
from loghubd.protocol import cursor as cursors
from loghubd.protocol import pb
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


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[LogService, D.Reader, Logstore, Clock]]:
    clock = Clock()
    storage = Storage(tmp_path / "db.sqlite3")
    service = LogService(storage, clock)
    service.create_project("demo", "")
    service.create_logstore("demo", "app", 30, 2)
    ls = service.logstore("demo", "app")
    reader = D.Reader(service, tmp_path / "db.sqlite3")
    yield service, reader, ls, clock
    reader.close()
    storage.close()


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
    view = reader.tail(ls, [0, 1], None, "")
    assert [log.record["id"] for log in view.logs] == [str(i) for i in range(99, 49, -1)]
    errors = reader.tail(ls, [0, 1], None, "* | where level = 'ERROR'")
    assert [log.record["id"] for log in errors.logs] == [str(i) for i in range(95, -1, -5)]
    one = reader.tail(ls, [0, 1], 1, "")
    assert {log.shard for log in one.logs} == {1}
    bad = reader.tail(ls, [0, 1], None, "* | where level = ")
    assert bad.error and not bad.logs
