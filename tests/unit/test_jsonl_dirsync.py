"""A new live file's name is made durable (its directory fsynced) once the file exists, at the
start, after a rotation and after an outside rotation took the old one away, unless
`fsync = "never"`: otherwise a power cut could take away a file whose batches were
checkpointed. The real `files.fsync_dir` runs; the test notes what existed at each call."""

from __future__ import annotations

from pathlib import Path

import pytest

from loghubd import files
from loghubd.processors.jsonl import JsonlFactory
from loghubd.testing import RecordingTracker, make_batch


@pytest.mark.parametrize("fsync", ["batch", "interval", "never"])
def test_the_directory_is_synced_after_each_new_live_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fsync: str
) -> None:
    live = tmp_path / "shard-0.jsonl"
    synced: list[tuple[str, int | None]] = []  # (step, the live file's inode at the sync)
    step = "start"
    real = files.fsync_dir

    def noting(directory: Path) -> None:
        assert directory == tmp_path
        synced.append((step, live.stat().st_ino if live.exists() else None))
        real(directory)

    monkeypatch.setattr(files, "fsync_dir", noting)
    p = JsonlFactory({"path": str(tmp_path), "fsync": fsync, "rotate_bytes": 100})(0)
    p.initialize(0)
    inodes = {"start": live.stat().st_ino}
    p.process(make_batch([{"i": "0", "pad": "x" * 200}]), RecordingTracker())
    step = "rotation"
    p.process(make_batch([{"i": "1"}], start=1), RecordingTracker())  # rotates first
    inodes["rotation"] = live.stat().st_ino
    live.unlink()  # an outside rotation took it away
    step = "reopen"
    p.process(make_batch([{"i": "2"}], start=2), RecordingTracker())
    inodes["reopen"] = live.stat().st_ino
    p.shutdown(RecordingTracker())
    if fsync == "never":
        assert synced == []
    else:  # each new file's name synced once it existed
        for name, inode in inodes.items():
            assert (name, inode) in synced, (name, synced)
