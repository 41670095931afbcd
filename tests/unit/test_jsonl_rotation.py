"""A rotation that fails part way (the new file cannot be made, the directory cannot be
synced) fails the batch, and the retry after the fault clears goes on from where it stopped:
no shard wedged, no line lost or written twice."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import pytest

from loghubd import files
from loghubd.processors.jsonl import JsonlFactory
from loghubd.testing import RecordingTracker, make_batch


def ids(path: Path) -> list[str]:
    data = path.read_bytes()
    assert not data or data.endswith(b"\n"), "a torn last line"
    return [json.loads(line)["i"] for line in data.splitlines()]


@pytest.mark.parametrize("fault", ["open the new file", "sync the directory"])
def test_a_rotation_that_fails_part_way_is_finished_by_the_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    p = JsonlFactory({"path": str(tmp_path), "rotate_bytes": 100})(0)
    p.initialize(0)
    p.process(make_batch([{"i": "0", "pad": "x" * 200}]), RecordingTracker())
    live = tmp_path / "shard-0.jsonl"
    faults: list[str] = []
    real_open, real_fsync_dir = os.open, files.fsync_dir

    def failing_open(path: Any, *args: Any, **kwargs: Any) -> int:
        if str(path) == str(live) and not faults:
            faults.append(fault)
            raise OSError(errno.ENOSPC, "No space left on device")  # no free inode
        return real_open(path, *args, **kwargs)

    def failing_fsync_dir(directory: Path) -> None:
        if not faults:
            faults.append(fault)
            raise OSError(errno.EIO, "Input/output error")
        real_fsync_dir(directory)

    if fault == "open the new file":
        monkeypatch.setattr(os, "open", failing_open)
    else:
        monkeypatch.setattr(files, "fsync_dir", failing_fsync_dir)
    second, tracker = make_batch([{"i": "1"}], start=1), RecordingTracker()
    with pytest.raises(OSError, match=r"No space left|Input/output error"):
        p.process(second, tracker)
    assert faults == [fault] and tracker.saved == []
    p.process(second, tracker)  # the retry, the fault gone
    p.process(make_batch([{"i": "2"}], start=2), tracker)
    p.shutdown(tracker)
    assert tracker.saved == [False, False]
    [closed] = tmp_path.glob("shard-0.*Z.jsonl")
    assert ids(closed) == ["0"]
    assert ids(live) == ["1", "2"]
