"""`loghubd dead-letters replay` with a processor that does not take a batch but answers a
cursor to read from (what the postgres sink does when its stored position is past the batch):
the dead letter is kept and the failure says why and what to do, instead of "did not mark it
done"."""

from __future__ import annotations

import json
from pathlib import Path

import anyio

from loghubd import Batch, Tracker
from loghubd.admin.deadletters import find, replay
from loghubd.plugins.loaded import load_factory
from loghubd.protocol import cursor as cursors
from tests.unit.consumer.scripted import log_groups


def dead_letter(directory: Path, shard: int, first: int) -> None:
    folder = directory / f"shard-{shard}"
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"20261126T000000-{first:06d}"
    (folder / f"{stem}.pb").write_bytes(log_groups(2))
    note = {
        "shard": shard,
        "cursor": cursors.from_seq(shard, first),
        "next_cursor": cursors.from_seq(shard, first + 2),
        "log_groups": 2,
        "error": "sink down",
    }
    (folder / f"{stem}.json").write_text(json.dumps(note))


class AheadSink:
    """Takes nothing: its stored position is past every batch (as postgres after a dead
    letter was written)."""

    def initialize(self, shard: int) -> None:
        pass

    def process(self, batch: Batch, tracker: Tracker) -> str:
        return cursors.from_seq(batch.shard, 100)

    def shutdown(self, tracker: Tracker) -> None:
        pass


class TakingSink(AheadSink):
    def process(self, batch: Batch, tracker: Tracker) -> None:  # type: ignore[override]
        tracker.save_checkpoint()


def test_a_declined_batch_is_kept_and_the_reason_says_what_to_do(tmp_path: Path) -> None:
    dead_letter(tmp_path, 3, 10)
    letters = find(tmp_path)
    ok, failures = anyio.run(replay, load_factory("ahead", lambda shard: AheadSink()), letters)
    assert ok == 0 and len(failures) == 1
    assert f"asked to read the shard from {cursors.from_seq(3, 100)}" in failures[0]
    assert "through another processor" in failures[0]
    assert len(find(tmp_path)) == 1, "a declined dead letter must be kept"


def test_a_taken_batch_is_removed(tmp_path: Path) -> None:
    dead_letter(tmp_path, 3, 10)
    ok, failures = anyio.run(
        replay, load_factory("taking", lambda shard: TakingSink()), find(tmp_path)
    )
    assert (ok, failures) == (1, [])
    assert find(tmp_path) == []
