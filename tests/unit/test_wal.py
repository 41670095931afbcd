"""The write-ahead log: atomic entries, locks that die with their process, coverage."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loghubd.protocol import cursor as cursors
from loghubd.wal import COMMITTED, PENDING, Entry, Range, Wal, merge, uncovered


def rng(shard: int, a: int, b: int) -> Range:
    return Range(shard, cursors.from_seq(shard, a), cursors.from_seq(shard, b))


def entry(batch: str, *ranges: Range) -> Entry:
    return Entry(batch=batch, project="p", logstore="ls", ranges=list(ranges))


def test_interval_arithmetic() -> None:
    assert merge([(5, 7), (0, 2), (2, 3), (6, 9), (4, 4)]) == [(0, 3), (5, 9)]
    cov = [(0, 3), (5, 9)]
    assert uncovered(0, 3, cov) == []
    assert uncovered(2, 6, cov) == [(1, 3)]  # positions 3, 4 relative to 2
    assert uncovered(8, 12, cov) == [(1, 4)]  # first (9 - 8) groups dropped
    assert uncovered(10, 12, cov) == [(0, 2)]
    assert uncovered(-2, 11, cov) == [(0, 2), (5, 7), (11, 13)]


def test_entry_lifecycle_and_coverage(tmp_path: Path) -> None:
    wal = Wal(tmp_path, "p", "ls")
    e = entry("b1", rng(0, 0, 10), rng(1, 5, 8), rng(0, 10, 12))
    lease = wal.begin(e)
    data = json.loads((tmp_path / "_loghubd_wal" / "b1.json").read_text())
    assert data["state"] == PENDING
    assert data["shards"] == {
        "0": {"start": cursors.from_seq(0, 0), "end": cursors.from_seq(0, 12)},
        "1": {"start": cursors.from_seq(1, 5), "end": cursors.from_seq(1, 8)},
    }
    assert data["batches"][1] == [1, cursors.from_seq(1, 5), cursors.from_seq(1, 8)]
    base0 = cursors.shard_base(0)
    assert wal.uncovered(0, base0, base0 + 12) == [(0, 12)]  # pending is not coverage
    wal.commit(lease)
    assert not lease.held
    assert json.loads((tmp_path / "_loghubd_wal" / "b1.json").read_text())["state"] == COMMITTED
    assert not (tmp_path / "_loghubd_wal" / "b1.lock").exists()
    assert wal.coverage(0) == [(base0, base0 + 12)]
    # Another reader (a restarted daemon) sees the same coverage from disk.
    again = Wal(tmp_path, "p", "ls")
    again.refresh(force=True)
    assert again.coverage(0) == [(base0, base0 + 12)]
    assert again.uncovered(0, base0 + 10, base0 + 15) == [(2, 5)]
    assert again.pending() == []
    # Another logstore's entries are not ours.
    other = Wal(tmp_path, "p", "other")
    other.refresh(force=True)
    assert other.coverage(0) == []
    assert not list((tmp_path / "_loghubd_wal").glob(".*"))  # no tmp files left


def test_a_pending_entry_is_locked_until_its_writer_dies(tmp_path: Path) -> None:
    """The lock is an flock: a live writer holds it; `kill -9` releases it."""
    code = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from loghubd.protocol import cursor as c\n"
        "from loghubd.wal import Wal, Entry, Range\n"
        f"w = Wal(Path({str(tmp_path)!r}), 'p', 'ls')\n"
        "w.begin(Entry('b2', 'p', 'ls', [Range(0, c.from_seq(0, 0), c.from_seq(0, 3))]))\n"
        "print('locked', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == b"locked"
        wal = Wal(tmp_path, "p", "ls")
        wal.refresh(force=True)
        [pending] = wal.pending()
        assert pending.batch == "b2"
        base = cursors.shard_base(0)
        assert wal.overlaps_pending(0, base + 2, base + 9) == [pending]
        assert wal.overlaps_pending(0, base + 3, base + 9) == []
        assert wal.try_lock(pending) is None  # its writer is alive
        proc.kill()
        proc.wait(10)
        lease = wal.try_lock(pending)  # dead: ours to recover
        assert lease is not None
        lease.release()
    finally:
        proc.kill()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


def test_abandon_removes_entry_and_partitions(tmp_path: Path) -> None:
    wal = Wal(tmp_path, "p", "ls")
    lease = wal.begin(entry("b3", rng(0, 0, 1)))
    part = tmp_path / "dt=2025-01-01" / "batch=b3"
    part.mkdir(parents=True)
    (part / "part-0.parquet").write_bytes(b"x")
    keep = tmp_path / "dt=2025-01-01" / "batch=b4"
    keep.mkdir()
    wal.abandon(lease)
    assert not part.exists() and keep.exists()
    assert not (tmp_path / "_loghubd_wal" / "b3.json").exists()


def test_gc_keeps_what_a_redelivery_could_still_need(tmp_path: Path) -> None:
    wal = Wal(tmp_path, "p", "ls")
    for name, ranges in {
        "old": [rng(0, 0, 10), rng(1, 0, 5)],
        "straddles": [rng(0, 10, 20)],
        "other-shard-unknown": [rng(2, 0, 5)],
    }.items():
        wal.commit(wal.begin(entry(name, *ranges)))
    pending = wal.begin(entry("pending", rng(0, 0, 3)))
    removed = wal.gc({0: cursors.shard_base(0) + 15, 1: cursors.shard_base(1) + 5})
    assert removed == 1
    names = sorted(p.name for p in (tmp_path / "_loghubd_wal").glob("*.json"))
    assert names == ["other-shard-unknown.json", "pending.json", "straddles.json"]
    pending.release()


def test_atomic_write_leaves_old_or_new(tmp_path: Path) -> None:
    from loghubd.files import atomic_write

    target = tmp_path / "x.json"
    atomic_write(target, b"old")
    atomic_write(target, b"new")
    assert target.read_bytes() == b"new"
    assert os.listdir(tmp_path) == ["x.json"]


def test_a_failed_atomic_write_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Write-ahead entries and dead-letter notes alike: a write that fails halfway (a full
    disk; a crash is the same for what is left on disk) leaves the old file whole."""
    from loghubd import files

    target = tmp_path / "note.json"
    files.atomic_write(target, b'{"old": true}')

    def half(fd: int, data: bytes) -> None:
        os.write(fd, data[:3])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files, "write_all", half)
    with pytest.raises(OSError, match="No space"):
        files.atomic_write(target, b'{"new": true}')
    assert target.read_bytes() == b'{"old": true}'
    assert os.listdir(tmp_path) == ["note.json"]


def test_gc_after_each_commit_keeps_the_log_as_short_as_the_checkpoint_allows(
    tmp_path: Path,
) -> None:
    """What the parquet processor does after every checkpoint commit: the entries behind the
    checkpoint go, those at or after it stay, and another process's view agrees."""
    writer = Wal(tmp_path, "p", "ls")
    reader = Wal(tmp_path, "p", "ls")  # a second owner's view, read from disk
    base = cursors.shard_base(0)
    for i in range(20):
        writer.commit(writer.begin(entry(f"e{i:02}", rng(0, 10 * i, 10 * i + 10))))
        checkpoint = base + max(0, 10 * i - 5)  # trails the writes: e{i-1} straddles it
        writer.gc({0: checkpoint})
        names = sorted(p.stem for p in (tmp_path / "_loghubd_wal").glob("*.json"))
        assert names == ([f"e{i - 1:02}", f"e{i:02}"] if i else ["e00"]), names
    # Collected entries still count as written: a redelivery of them is recognised.
    assert writer.coverage(0) == [(base, base + 200)]
    reader.refresh(force=True)
    assert reader.coverage(0) == [(base + 180, base + 200)]
    assert reader.gc({0: base + 200}) == 2
    writer.refresh(force=True)  # what another process removed is forgotten, not re-read
    assert writer.gc({0: base + 200}) == 0
    assert not list((tmp_path / "_loghubd_wal").glob("*.json"))


def test_an_entry_without_positions_is_never_collected(tmp_path: Path) -> None:
    wal = Wal(tmp_path, "p", "ls")
    odd = Entry(batch="odd", project="p", logstore="ls", ranges=[Range(0, "", "")])
    wal.commit(wal.begin(odd))
    assert wal.gc({0: cursors.shard_base(1)}) == 0
    assert (tmp_path / "_loghubd_wal" / "odd.json").exists()


def test_entries_of_another_logstore_are_read_once(tmp_path: Path) -> None:
    """A directory shared with another logstore's writer: its entries are never ours, so the
    refresh that every gc (every checkpoint commit) does reads each of them once only."""
    other = Wal(tmp_path, "p", "other")
    for i in range(3):
        other.commit(other.begin(Entry(batch=f"o{i}", project="p", logstore="other",
                                       ranges=[rng(0, 10 * i, 10 * i + 10)])))  # fmt: skip
    wal = Wal(tmp_path, "p", "ls")
    reads: list[str] = []
    read = wal.read

    def counting(batch: str) -> Entry | None:
        reads.append(batch)
        return read(batch)

    wal.read = counting  # type: ignore[method-assign]
    base = cursors.shard_base(0)
    for _ in range(3):
        assert wal.gc({0: base + 100}) == 0
    assert sorted(reads) == ["o0", "o1", "o2"]
    assert wal.coverage(0) == []
    assert len(list((tmp_path / "_loghubd_wal").glob("*.json"))) == 3


def test_gc_records_the_floor_before_it_collects_when_asked(tmp_path: Path) -> None:
    wal = Wal(tmp_path, "p", "ls")
    wal.commit(wal.begin(entry("b1", rng(0, 0, 10))))
    assert wal.floor(0) is None
    base = cursors.shard_base(0)
    assert wal.gc({0: base + 5}, record_floor=True) == 0  # nothing went: no floor needed
    assert wal.floor(0) is None
    assert wal.gc({0: base + 12}) == 1  # the Spark processor's collection: no floor
    assert wal.floor(0) is None
    wal.commit(wal.begin(entry("b2", rng(0, 12, 20))))
    assert wal.gc({0: base + 20}, record_floor=True) == 1
    assert wal.floor(0) == base + 20
    assert Wal(tmp_path, "p", "other").floor(0) is None  # per logstore
    wal.commit(wal.begin(entry("b3", rng(0, 20, 30))))
    wal.commit(wal.begin(entry("b0", rng(0, 0, 2))))  # a late writer, below the floor
    assert wal.gc({0: base + 2}, record_floor=True) == 1
    assert wal.floor(0) == base + 20  # only rises
    assert not list((tmp_path / "_loghubd_wal").glob(".*"))


def test_a_damaged_floor_names_its_file(tmp_path: Path) -> None:
    wal = Wal(tmp_path, "p", "ls")
    wal.ensure()
    wal.floor_path(3).write_text("{")
    with pytest.raises(ValueError, match=r"floor\.p\.ls\.3: not a write-ahead floor"):
        wal.floor(3)


def test_abandon_raises_holding_the_lease_and_abandon_quietly_releases_it(
    tmp_path: Path,
) -> None:
    """A partition that cannot be deleted: `abandon` raises with the lease still held (the
    Spark processor retries it); `abandon_quietly` logs it, keeps the entry (pending, its
    lock free: the next recovery tries again) and always releases the lease."""

    def cannot(batch: str) -> None:
        raise PermissionError(13, "Permission denied", batch)

    wal = Wal(tmp_path, "p", "ls", remove_partitions=cannot)
    lease = wal.begin(entry("b1", rng(0, 0, 10)))
    with pytest.raises(PermissionError):
        wal.abandon(lease)
    assert lease.held
    assert wal.abandon_quietly(lease) is False
    assert not lease.held
    kept = wal.read("b1")
    assert kept is not None and kept.state == PENDING
    assert wal.try_lock(kept) is not None  # free: a later recovery can take it


def test_what_a_writer_killed_in_begin_left_is_swept_and_nothing_else(tmp_path: Path) -> None:
    """A kill -9 inside `begin` left `.<batch>.json.<pid>-<hex>.tmp` and `<batch>.lock`
    with no entry, never removed (file sinks audit). Old ones go; a held lock, a lock beside
    its entry and young files stay."""
    import fcntl

    w = Wal(tmp_path, "p", "ls")
    w.ensure()
    d = w.dir
    old = time.time() - 3600
    orphans = [d / ".b1.json.123-abcd.tmp", d / "b2.lock"]
    young = [d / ".b3.json.124-abcd.tmp", d / "b4.lock"]
    kept = [d / "b5.lock", d / "b5.json", d / "held.lock", d / "shard-ls-0.flock"]
    for path in orphans + young + kept:
        path.write_bytes(b"")
    for path in orphans + kept:
        os.utime(path, (old, old))
    holder = os.open(d / "held.lock", os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        assert w.sweep_orphans() == 2
    finally:
        os.close(holder)
    assert sorted(p.name for p in d.iterdir()) == sorted(p.name for p in young + kept)
