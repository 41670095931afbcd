"""A restart after a crash mid-batch (kill -9, a power cut): the torn last line the crash left
is cut off before the batch read again is appended, so no line is glued to another."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import structlog

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
