"""logrotate (or an operator) under a running processor: `copytruncate` empties the live file,
`create` renames it and makes a new one, `rotate 0` removes it. Each batch goes to the file
now at `shard-<shard>.jsonl`, and a failed write is cut back to where it really began."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import pytest
import structlog

from loghubd.files import write_all
from loghubd.models import Batch
from loghubd.processors.jsonl import JsonlFactory
from loghubd.testing import RecordingTracker, make_batch


def b(i: int) -> Batch:
    return make_batch([{"i": str(i), "pad": "x" * 100}], start=i)


def ids(path: Path) -> list[int]:
    data = path.read_bytes()
    assert not data or data.endswith(b"\n"), "a torn last line"
    return [int(json.loads(line)["i"]) for line in data.splitlines()]  # NUL bytes fail here


def test_copytruncate_then_a_failed_write_is_cut_back_to_the_real_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = JsonlFactory({"path": str(tmp_path)})(0)
    p.initialize(0)
    for i in range(5):
        p.process(b(i), RecordingTracker())
    live = tmp_path / "shard-0.jsonl"
    shutil.copy(live, tmp_path / "shard-0.jsonl.1")  # logrotate copytruncate
    os.truncate(live, 0)
    p.process(b(5), RecordingTracker())
    real = Batch.write_jsonl

    def torn(self: Batch, fd: int, max_bytes: int = 1 << 20) -> int:
        write_all(fd, b'{"torn')
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Batch, "write_jsonl", torn)
    with pytest.raises(OSError, match="No space"):
        p.process(b(6), RecordingTracker())
    assert ids(live) == [5]  # not grown back to the old size with NUL bytes
    monkeypatch.setattr(Batch, "write_jsonl", real)
    p.process(b(6), RecordingTracker())
    p.shutdown(RecordingTracker())
    assert ids(tmp_path / "shard-0.jsonl.1") == [0, 1, 2, 3, 4]
    assert ids(live) == [5, 6]


@pytest.mark.parametrize("how", ["renamed and created", "removed"])
def test_a_live_file_taken_away_is_opened_again(tmp_path: Path, how: str) -> None:
    p = JsonlFactory({"path": str(tmp_path), "fsync": "batch"})(0)
    p.initialize(0)
    p.process(b(0), RecordingTracker())
    live = tmp_path / "shard-0.jsonl"
    if how == "removed":  # logrotate's `rotate 0`, or an operator
        live.unlink()
    else:  # logrotate's default: rename, then `create`
        live.rename(tmp_path / "shard-0.jsonl.1")
        live.touch()
    tracker = RecordingTracker()
    with structlog.testing.capture_logs() as logs:
        for i in range(1, 4):
            p.process(b(i), tracker)
    p.shutdown(tracker)
    assert tracker.saved == [False] * 3
    assert ids(live) == [1, 2, 3]  # none went to the old file, or to a deleted one
    if how != "removed":
        assert ids(tmp_path / "shard-0.jsonl.1") == [0]
    [reopened] = [e for e in logs if e["event"] == "jsonl_file_reopened"]
    assert reopened["reason"] == {"removed": "removed"}.get(how, "replaced")


def test_the_renamed_file_is_synced_before_it_is_let_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its last batches' checkpoints may not be committed yet, and the next `flush()` (before
    the commit) syncs only the new file."""
    p = JsonlFactory({"path": str(tmp_path), "fsync": "interval"})(0)
    p.initialize(0)
    p.process(b(0), RecordingTracker())
    live = tmp_path / "shard-0.jsonl"
    old_inode = live.stat().st_ino
    live.rename(tmp_path / "shard-0.jsonl.1")
    synced: list[int] = []
    real = os.fsync

    def noting(fd: int) -> None:
        synced.append(os.fstat(fd).st_ino)
        real(fd)

    monkeypatch.setattr(os, "fsync", noting)
    p.process(b(1), RecordingTracker())
    p.shutdown(RecordingTracker())
    assert old_inode in synced
    assert ids(tmp_path / "shard-0.jsonl.1") == [0] and ids(live) == [1]


def test_a_live_file_removed_while_a_batch_is_written_gets_the_batch_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The removal lands between the processor's look at the path and its write (logrotate's
    `rotate 0` racing a batch): the batch went to a deleted file, so it is written again, to
    a new live file, before its checkpoint is saved."""
    p = JsonlFactory({"path": str(tmp_path)})(0)
    p.initialize(0)
    p.process(b(0), RecordingTracker())
    live = tmp_path / "shard-0.jsonl"
    real = Batch.write_jsonl
    removals = []

    def racing(self: Batch, fd: int, max_bytes: int = 1 << 20) -> int:
        if not removals:
            removals.append(live)
            live.unlink()  # after _follow_path looked
        return real(self, fd, max_bytes)

    monkeypatch.setattr(Batch, "write_jsonl", racing)
    tracker = RecordingTracker()
    with structlog.testing.capture_logs() as logs:
        p.process(b(1), tracker)
    monkeypatch.setattr(Batch, "write_jsonl", real)
    p.process(b(2), tracker)
    p.shutdown(tracker)
    assert removals and tracker.saved == [False, False]
    assert ids(live) == [1, 2]
    assert [e["reason"] for e in logs if e["event"] == "jsonl_file_reopened"] == ["removed"]
