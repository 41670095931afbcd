"""The `jsonl` files of shards no processor holds (`jsonl_unheld`): what is cut, closed and
compressed, what is left alone, and how the factory's look at them keeps out of its own
processors' way."""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path

import pytest
import structlog
import zstandard

from loghubd import files
from loghubd.processors.jsonl import JsonlFactory
from loghubd.processors.jsonl_unheld import ShardClaims, look_after_unheld
from loghubd.testing import RecordingTracker

CLOSED = re.compile(r"shard-(\d+)\.\d{8}T\d{6}\.\d{6}Z\.jsonl")
NOW = 1_900_000_000.0


def write(path: Path, data: bytes, age_s: float) -> None:
    path.write_bytes(data)
    os.utime(path, (NOW - age_s, NOW - age_s))


def test_a_live_file_not_written_for_rotate_seconds_is_closed_and_others_are_left(
    tmp_path: Path,
) -> None:
    """Shard 1 was last written 61 s ago: closed (rotate_after 60). Shard 2 was written 59 s
    ago, shard 3 is empty, shard 4's processor here holds it, shard 5's lock is held by
    another daemon: all left as they are."""
    line = b'{"id":"x"}\n'
    for shard, age in [(1, 61), (2, 59), (4, 61), (5, 61)]:
        write(tmp_path / f"shard-{shard}.jsonl", line, age)
    write(tmp_path / "shard-3.jsonl", b"", 61)
    claims = ShardClaims()
    claims.hold(4)
    other = files.lock_exclusive(tmp_path / ".shard-5.lock")
    rotations: list[None] = []
    with structlog.testing.capture_logs() as logs:
        look_after_unheld(
            tmp_path,
            claims,
            rotate_after=60,
            rotated=lambda: rotations.append(None),
            now=lambda: NOW,
        )
    assert other is not None
    os.close(other)
    names = sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("."))
    [closed] = [n for n in names if CLOSED.fullmatch(n)]
    assert closed.startswith("shard-1.") and (tmp_path / closed).read_bytes() == line
    assert sorted(set(names) - {closed}) == [f"shard-{n}.jsonl" for n in (2, 3, 4, 5)]
    assert len(rotations) == 1
    [event] = [e for e in logs if e["event"] == "jsonl_rotated"]
    assert event["shard"] == 1 and event["reason"] == "not held", event


def test_without_rotate_seconds_a_live_file_only_loses_its_torn_line(tmp_path: Path) -> None:
    write(tmp_path / "shard-1.jsonl", b'{"id":"x"}\n{"id', 3600)
    look_after_unheld(tmp_path, ShardClaims(), now=lambda: NOW)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".shard-1.lock", "shard-1.jsonl"]
    assert (tmp_path / "shard-1.jsonl").read_bytes() == b'{"id":"x"}\n'


def test_the_factory_compresses_what_a_shard_that_moved_away_left_closed(tmp_path: Path) -> None:
    """A stop abandoned shard 9's compression (or a crash cut it short), and shard 9 never came
    back: the factory's start compresses its closed file, as its processor would have."""
    data = b"".join(b'{"id":"%d"}\n' % n for n in range(1000))
    closed = tmp_path / "shard-9.20261129T000000.000000Z.jsonl"
    closed.write_bytes(data)
    (tmp_path / "shard-9.20261129T000000.000000Z.jsonl.zst.part").write_bytes(b"half")
    factory = JsonlFactory({"path": str(tmp_path), "compress": "zstd"})
    factory.start()
    factory.wait_unheld_looked_after()
    factory.close()
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == [
        "shard-9.20261129T000000.000000Z.jsonl.zst"
    ]
    packed = (tmp_path / "shard-9.20261129T000000.000000Z.jsonl.zst").read_bytes()
    assert zstandard.ZstdDecompressor().decompressobj().decompress(packed) == data


def test_a_shard_being_looked_after_is_waited_for_by_its_processor(tmp_path: Path) -> None:
    """This daemon's processor for shard 5 starts while the factory holds shard 5's files: it
    waits, then starts, instead of failing its start on the lock (a retry with back-off and an
    error in /status for nothing)."""
    factory = JsonlFactory({"path": str(tmp_path)})
    processor = factory(5)
    started, failed = threading.Event(), []

    def start() -> None:
        try:
            processor.initialize(5)
        except Exception as exc:
            failed.append(exc)
        started.set()

    with factory.claims.sweeping(5) as free:
        assert free
        lock = files.lock_exclusive(tmp_path / ".shard-5.lock")  # as look_after_unheld does
        assert lock is not None
        thread = threading.Thread(target=start)
        thread.start()
        # Waiting in the claims for the look to end (not spinning on the lock: that would
        # give up after a second and fail the start).
        for _ in range(3000):
            if factory.claims.wanted(5):
                break
            time.sleep(0.01)
        assert factory.claims.wanted(5) and not started.is_set()
        os.close(lock)
    assert started.wait(30) and not failed, failed
    thread.join()
    with factory.claims.sweeping(5) as free:
        assert not free  # held by the processor now: skipped
    processor.shutdown(RecordingTracker())
    with factory.claims.sweeping(5) as free:
        assert free  # let go at its shutdown


def test_a_lock_held_for_a_moment_by_another_process_is_waited_for(tmp_path: Path) -> None:
    """Another worker of a `--workers` daemon (one directory) takes shard 2's lock for a
    moment to look at its files: shard 2's start here waits for it instead of failing (a
    retry with back-off and a warning for nothing). A lock held past the grace still fails
    the start, as test_jsonl_errors shows."""
    lock = files.lock_exclusive(tmp_path / ".shard-2.lock")
    assert lock is not None
    timer = threading.Timer(0.2, os.close, (lock,))
    timer.start()
    processor = JsonlFactory({"path": str(tmp_path)})(2)
    processor.initialize(2)
    timer.join()
    processor.shutdown(RecordingTracker())


def test_a_processor_waiting_for_its_shard_asks_the_look_to_give_up() -> None:
    """While the look has shard 3, a processor starting shard 3 waits, and `wanted(3)` tells
    the look's compression to give up (within a MiB); once the look lets go, the processor
    holds the shard and nothing waits any more."""
    claims = ShardClaims()
    holding = threading.Event()
    with claims.sweeping(3) as free:
        assert free and not claims.wanted(3)
        thread = threading.Thread(target=lambda: (claims.hold(3), holding.set()))
        thread.start()
        for _ in range(3000):
            if claims.wanted(3):
                break
            time.sleep(0.01)
        assert claims.wanted(3) and not holding.is_set()
        with claims.sweeping(3) as again:
            assert not again  # one look at a shard at a time
    assert holding.wait(30)
    thread.join()
    assert not claims.wanted(3)


def test_a_compression_told_to_give_up_leaves_the_closed_file_whole(tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry, Counter

    from loghubd.processors.jsonl_compress import Abandoned, Compressor

    data = b'{"id":"1"}\n' * 300_000  # > 1 MiB: asked between chunks
    closed = tmp_path / "shard-3.20261129T000000.000000Z.jsonl"
    closed.write_bytes(data)
    failures = Counter("f", "f", registry=CollectorRegistry())
    reasons = iter([None, "its shard is starting here"])
    compressor = Compressor(tmp_path, 3, "zstd", True, failures, abandon=lambda: next(reasons))
    with structlog.testing.capture_logs() as logs, pytest.raises(Abandoned):
        compressor.compress_closed()
    assert sorted(p.name for p in tmp_path.iterdir()) == [closed.name]
    assert closed.read_bytes() == data
    [event] = [e for e in logs if e["event"] == "jsonl_compress_abandoned"]
    assert event["reason"] == "its shard is starting here", event
