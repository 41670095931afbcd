"""`read_records`, which every delivery check reads the daemons' output with: a file ending in
part of a line (a daemon killed mid-write) is left out only where the caller allows it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.harness_output import read_records

WHOLE = b'{"id": "1"}\n{"id": "2"}\n'
TORN = b'{"id": "3", "__sou'


def test_a_torn_last_line_is_named_unless_the_caller_allows_it(tmp_path: Path) -> None:
    (tmp_path / "shard-0.jsonl").write_bytes(WHOLE + TORN)
    with pytest.raises(AssertionError, match=r"shard-0\.jsonl ends in part of a line"):
        read_records([tmp_path])
    records = read_records([tmp_path], torn_tail_ok=True)
    assert records == [(0, {"id": "1"}), (0, {"id": "2"})]


def test_whole_lines_are_read_either_way(tmp_path: Path) -> None:
    (tmp_path / "shard-3.jsonl").write_bytes(WHOLE)
    expected = [(3, {"id": "1"}), (3, {"id": "2"})]
    assert read_records([tmp_path]) == read_records([tmp_path], torn_tail_ok=True) == expected


def test_two_lines_glued_together_fail_even_when_a_torn_tail_is_allowed(tmp_path: Path) -> None:
    (tmp_path / "shard-1.jsonl").write_bytes(TORN + WHOLE)
    with pytest.raises(json.JSONDecodeError, match="Expecting"):
        read_records([tmp_path], torn_tail_ok=True)
