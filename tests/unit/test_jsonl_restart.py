"""A restart after a crash mid-batch (kill -9, a power cut): the torn last line the crash left
is cut off before the batch read again is appended, so no line is glued to another."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import structlog

from loghubd import files
from loghubd.processors.jsonl import JsonlFactory
from loghubd.testing import RecordingTracker, make_batch


@pytest.mark.parametrize("whole_lines", [3, 0])
def test_a_torn_last_line_is_cut_off_at_start(tmp_path: Path, whole_lines: int) -> None:
    before = make_batch([{"i": str(n), "pad": "y" * 100} for n in range(whole_lines)]).jsonl()
    torn = make_batch([{"i": "torn", "pad": "y" * 70_000}]).jsonl()[:-5000]  # no newline
    live = tmp_path / "shard-0.jsonl"
    live.write_bytes(before + torn)  # what a kill -9 in the middle of a write leaves
    p = JsonlFactory({"path": str(tmp_path)})(0)
    with structlog.testing.capture_logs() as logs:
        p.initialize(0)
    p.process(make_batch([{"i": "again"}]), RecordingTracker())  # the batch read again
    p.shutdown(RecordingTracker())
    lines = live.read_bytes().splitlines()
    assert [json.loads(line)["i"] for line in lines] == [*map(str, range(whole_lines)), "again"]
    [warning] = [e for e in logs if e["event"] == "jsonl_torn_line_removed"]
    assert warning["removed_bytes"] == len(torn) and warning["log_level"] == "warning"


def test_a_file_that_ends_in_a_newline_is_left_as_it_is(tmp_path: Path) -> None:
    before = make_batch([{"i": "0"}]).jsonl()
    (tmp_path / "shard-0.jsonl").write_bytes(before)
    p = JsonlFactory({"path": str(tmp_path)})(0)
    with structlog.testing.capture_logs() as logs:
        p.initialize(0)
    p.shutdown(RecordingTracker())
    assert (tmp_path / "shard-0.jsonl").read_bytes() == before
    assert not [e for e in logs if e["event"] == "jsonl_torn_line_removed"]


def test_the_factory_cuts_the_torn_lines_of_shards_nobody_holds(tmp_path: Path) -> None:
    """A crashed daemon's shard 5 went to a daemon writing elsewhere: this daemon never opens
    shard 5 again, so its start cuts the torn line. Shard 6's file is being written by another
    processor (its lock is held): left to it. Closed files and other names are not touched."""
    whole = make_batch([{"i": "0"}]).jsonl()
    torn = make_batch([{"i": "torn", "pad": "y" * 100}]).jsonl()[:-7]
    files_before = {
        "shard-5.jsonl": whole + torn,
        "shard-6.jsonl": whole + torn,
        "shard-7.jsonl": whole,
        "shard-5.20261129T000000.000000Z.jsonl": whole + torn,  # not a live file's name
        "shard-x.jsonl": whole + torn,
        "notes.txt": torn,
    }
    for name, data in files_before.items():
        (tmp_path / name).write_bytes(data)
    holder = files.lock_exclusive(tmp_path / ".shard-6.lock")
    assert holder is not None
    factory = JsonlFactory({"path": str(tmp_path)})
    try:
        with structlog.testing.capture_logs() as logs:
            factory.start()
            factory.wait_unheld_looked_after()
    finally:
        factory.close()
        os.close(holder)
    after = {name: (tmp_path / name).read_bytes() for name in files_before}
    assert after == {**files_before, "shard-5.jsonl": whole}
    [warning] = [e for e in logs if e["event"] == "jsonl_torn_line_removed"]
    assert warning["path"] == str(tmp_path / "shard-5.jsonl")
    assert warning["removed_bytes"] == len(torn)
    # The lock is let go: shard 5 can be taken at once, by this daemon or another.
    p = JsonlFactory({"path": str(tmp_path)})(5)
    p.initialize(5)
    p.shutdown(RecordingTracker())


def test_a_file_that_cannot_be_cut_is_reported_and_the_start_goes_on(tmp_path: Path) -> None:
    """A symlink in the live file's place is never followed (O_NOFOLLOW): logged, and the
    factory starts; the file it points at keeps its bytes."""
    target = tmp_path / "elsewhere"
    target.write_bytes(b"not ours, no newline")
    (tmp_path / "shard-3.jsonl").symlink_to(target)
    factory = JsonlFactory({"path": str(tmp_path)})
    with structlog.testing.capture_logs() as logs:
        factory.start()
        factory.wait_unheld_looked_after()
    factory.close()
    [failed] = [e for e in logs if e["event"] == "jsonl_unheld_shard_failed"]
    assert failed["shard"] == 3 and failed["log_level"] == "warning", failed
    assert "Too many levels of symbolic links" in failed["error"], failed
    assert target.read_bytes() == b"not ours, no newline"


def test_a_replay_run_leaves_the_live_files_alone(tmp_path: Path) -> None:
    """`dead-letters replay` runs beside the live daemon: it writes files of its own and
    takes no shard's lock, so it cuts nothing either."""
    torn = make_batch([{"i": "torn"}]).jsonl()[:-3]
    (tmp_path / "shard-2.jsonl").write_bytes(torn)
    factory = JsonlFactory({"path": str(tmp_path)})
    factory.replay = True
    factory.start()
    factory.wait_unheld_looked_after()
    factory.close()
    assert (tmp_path / "shard-2.jsonl").read_bytes() == torn
    assert not (tmp_path / ".shard-2.lock").exists()
