"""The `jsonl` processor on its own: a failed write is cut back before the retry (an injected
ENOSPC, and a real full tmpfs), options are checked, files rotate and get compressed."""

from __future__ import annotations

import errno
import gzip
import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import structlog
import zstandard
from prometheus_client import CollectorRegistry

from loghubd.files import write_all
from loghubd.models import Batch
from loghubd.processors import jsonl
from loghubd.processors.jsonl import JsonlFactory, JsonlOptions, JsonlProcessor
from loghubd.protocol import cursor as cursors
from loghubd.protocol import pb
from loghubd.testing import RecordingTracker, make_context


def batch(first: int, count: int, size: int = 40) -> Batch:
    group = pb.LogGroup(Topic="t")
    for i in range(first, first + count):
        group.Logs.add(Time=i).Contents.add(Key="id", Value=f"{i:06d}" + "x" * size)
    raw = pb.frame_log_groups([group.SerializeToString()])
    return Batch(0, "c", "n", raw, 1)


def ids(path: Path) -> list[int]:
    text = path.read_bytes()
    assert not text or text.endswith(b"\n"), "a torn last line"
    return [int(json.loads(line)["id"][:6]) for line in text.splitlines()]


def test_lines_are_batch_jsonl(tmp_path: Path) -> None:
    p = JsonlProcessor(tmp_path, 0)
    p.initialize(0)
    b = batch(0, 5)
    p.process(b, RecordingTracker())
    p.shutdown(RecordingTracker())
    assert (tmp_path / "shard-0.jsonl").read_bytes() == b.jsonl()


@pytest.mark.parametrize("name", ["shard-0.jsonl", ".shard-0.lock"])
def test_a_symlink_in_place_of_its_files_is_refused_not_followed(tmp_path: Path, name: str) -> None:
    """Whoever can write to the output directory must not make the daemon append logs to,
    or create, a file elsewhere."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(b"ORIGINAL\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / name).symlink_to(elsewhere)
    p = JsonlProcessor(out, 0)

    def consume() -> None:
        p.initialize(0)
        p.process(batch(0, 5), RecordingTracker())

    with pytest.raises(OSError, match=r"symbolic links|ELOOP"):
        consume()
    assert elsewhere.read_bytes() == b"ORIGINAL\n"


def test_injected_enospc_mid_batch_is_cut_back_before_the_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = JsonlProcessor(tmp_path, 0)
    p.initialize(0)
    tracker = RecordingTracker()
    p.process(batch(0, 100), tracker)
    real = Batch.write_jsonl
    calls = {"n": 0}

    def half_then_full(self: Batch, fd: int, max_bytes: int = 1 << 20) -> int:
        calls["n"] += 1
        data = self.jsonl()
        write_all(fd, data[: len(data) // 2 + 7])  # a torn line on disk
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Batch, "write_jsonl", half_then_full)
    failing = batch(100, 100)
    with pytest.raises(OSError, match="No space"):
        p.process(failing, tracker)
    assert calls["n"] == 1 and tracker.saved == [False]  # not saved: the batch failed
    assert ids(tmp_path / "shard-0.jsonl") == list(range(100))  # cut back at once
    monkeypatch.setattr(Batch, "write_jsonl", real)
    p.process(failing, tracker)
    p.process(batch(200, 10), tracker)
    p.shutdown(tracker)
    assert ids(tmp_path / "shard-0.jsonl") == list(range(210))


def test_cut_back_fails_too_the_retry_cuts_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = JsonlProcessor(tmp_path, 0)
    p.initialize(0)
    p.process(batch(0, 10), RecordingTracker())
    real_write, real_truncate = Batch.write_jsonl, os.ftruncate

    def torn(self: Batch, fd: int, max_bytes: int = 1 << 20) -> int:
        write_all(fd, self.jsonl()[:13])
        raise OSError(errno.EIO, "I/O error")

    def refuse(fd: int, length: int) -> None:
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(Batch, "write_jsonl", torn)
    monkeypatch.setattr(os, "ftruncate", refuse)
    with pytest.raises(OSError, match="I/O"):
        p.process(batch(10, 10), RecordingTracker())
    monkeypatch.setattr(Batch, "write_jsonl", real_write)
    monkeypatch.setattr(os, "ftruncate", real_truncate)
    p.process(batch(10, 10), RecordingTracker())
    p.shutdown(RecordingTracker())
    assert ids(tmp_path / "shard-0.jsonl") == list(range(20))


def test_real_full_tmpfs_then_grown_leaves_no_torn_line_or_duplicate(tiny_tmpfs: Path) -> None:
    p = JsonlProcessor(tiny_tmpfs / "out", 0, JsonlOptions(fsync="batch"))
    p.initialize(0)
    tracker = RecordingTracker()
    first = failures = 0
    errors: list[int | None] = []
    while first < 5000:
        b = batch(first, 50, size=200)
        try:
            p.process(b, tracker)
        except OSError as e:
            errors.append(e.errno)
            failures += 1
            if failures == 3:  # retried twice on the full disk: now grow it
                subprocess.run(["mount", "-o", "remount,size=64m", str(tiny_tmpfs)], check=True)
            continue
        first += 50
    p.shutdown(tracker)
    assert errors == [errno.ENOSPC] * 3
    assert ids(tiny_tmpfs / "out" / "shard-0.jsonl") == list(range(5000))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "processor.jsonl.path: required"),
        ({"path": "x", "fsync": "always"}, "processor.jsonl.fsync: one of batch"),
        ({"path": "x", "compress": "lz4"}, "processor.jsonl.compress: one of none"),
        ({"path": "x", "rotate_bytes": -5}, r"processor.jsonl.rotate_bytes: .*>= 0.*, got -5$"),
        (
            {"path": "x", "rotate_bytes": "1MB"},
            "processor.jsonl.rotate_bytes: expected an integer, got a string '1MB'",
        ),
        ({"path": "x", "rotate_bytes": True}, "processor.jsonl.rotate_bytes: .* got true"),
        ({"path": "x", "rotate_seconds": -2.0}, r"processor.jsonl.rotate_seconds: .*, got -2$"),
        ({"path": "x", "rotate": 1}, "processor.jsonl.rotate: unknown key"),
    ],
)
def test_bad_options_name_the_key(options: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        JsonlFactory(options)


def test_every_bad_key_of_the_table_is_named_at_once() -> None:
    """One check-config run per bad key was the file sinks audit's complaint."""
    with pytest.raises(ValueError, match="rotate_bytess") as refused:
        JsonlFactory({"path": "x", "rotate_bytess": 5, "fsync": "sometimes", "compress": "rar"})
    assert str(refused.value).splitlines() == [
        "processor.jsonl.rotate_bytess: unknown key (did you mean processor.jsonl.rotate_bytes?)",
        "processor.jsonl.fsync: one of batch, interval, never, not 'sometimes'",
        "processor.jsonl.compress: one of none, gzip, zstd, not 'rar'",
    ]


@pytest.mark.parametrize("compress", ["none", "gzip", "zstd"])
def test_rotation_by_size_names_and_compresses_closed_files(tmp_path: Path, compress: str) -> None:
    p = JsonlFactory({"path": str(tmp_path), "rotate_bytes": 3000, "compress": compress})(2)
    p.initialize(2)
    for first in range(0, 400, 20):
        p.process(batch(first, 20), RecordingTracker())
    p.wait_compressed()  # in a thread of its own; a shutdown would leave it for the next start
    p.shutdown(RecordingTracker())
    closed = sorted(tmp_path.glob("shard-2.*Z.jsonl*"))
    assert len(closed) >= 3
    suffix = {"none": ".jsonl", "gzip": ".jsonl.gz", "zstd": ".jsonl.zst"}[compress]
    assert all(f.name.endswith(suffix) for f in closed)
    text = b""
    for f in closed:
        data = f.read_bytes()
        if compress == "gzip":
            data = gzip.decompress(data)
        elif compress == "zstd":
            data = zstandard.ZstdDecompressor().decompressobj().decompress(data)
        assert 3000 <= len(data) < 3000 + 20 * 80  # closed at the first batch past the size
        text += data
    text += (tmp_path / "shard-2.jsonl").read_bytes()
    assert [int(json.loads(x)["id"][:6]) for x in text.splitlines()] == list(range(400))


def test_rotation_by_time(tmp_path: Path) -> None:
    p = JsonlFactory({"path": str(tmp_path), "rotate_seconds": 0.2})(0)
    p.initialize(0)
    p.process(batch(0, 5), RecordingTracker())
    p.process(batch(5, 5), RecordingTracker())
    assert not list(tmp_path.glob("shard-0.*Z.jsonl"))
    time.sleep(0.3)
    p.process(batch(10, 5), RecordingTracker())
    p.shutdown(RecordingTracker())
    [closed] = tmp_path.glob("shard-0.*Z.jsonl")
    assert ids(closed) == list(range(10))
    assert ids(tmp_path / "shard-0.jsonl") == list(range(10, 15))


def wait_for(check: Callable[[], object], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.02)


def test_a_quiet_shards_file_is_closed_by_the_clock(tmp_path: Path) -> None:
    """No batch comes after the first: the factory's clock closes (and compresses) the file
    once it has been open `rotate_seconds`, and leaves the new empty one open. A shard whose
    failed batch waits for its retry is left to the retry."""
    factory = JsonlFactory({"path": str(tmp_path), "rotate_seconds": 0.3, "compress": "gzip"})
    factory.start()
    quiet, failing = factory(0), factory(1)
    try:
        for p in (quiet, failing):
            p.initialize(p.shard)
            p.process(batch(0, 5), RecordingTracker())
        failing._torn = os.fstat(failing._fd).st_size  # as a failed batch leaves it
        wait_for(lambda: list(tmp_path.glob("shard-0.*Z.jsonl.gz")), "shard 0 closed")
        [closed] = tmp_path.glob("shard-0.*Z.jsonl.gz")
        lines = gzip.decompress(closed.read_bytes()).splitlines()
        assert [int(json.loads(x)["id"][:6]) for x in lines] == list(range(5))
        assert (tmp_path / "shard-0.jsonl").read_bytes() == b""
        time.sleep(0.5)  # an empty file is not closed, however long it is open
        assert len(list(tmp_path.glob("shard-0.*Z.jsonl*"))) == 1
        assert not list(tmp_path.glob("shard-1.*Z.jsonl*"))  # left to the retry
        failing._torn = None
        wait_for(lambda: list(tmp_path.glob("shard-1.*Z.jsonl.gz")), "shard 1 closed")
    finally:
        quiet.shutdown(RecordingTracker())
        failing.shutdown(RecordingTracker())
        factory.close()


def test_a_failed_close_by_the_clock_is_logged_and_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jsonl, "CLOSE_RETRY_S", 0.2)
    real, refused = os.rename, []

    def refuse_once(src: object, dst: object) -> None:
        if not refused:
            refused.append(src)
            raise OSError(errno.EROFS, "Read-only file system")
        real(src, dst)  # type: ignore[arg-type]

    factory = JsonlFactory({"path": str(tmp_path), "rotate_seconds": 0.2})
    p = factory(0)
    p.initialize(0)
    p.process(batch(0, 5), RecordingTracker())
    monkeypatch.setattr(os, "rename", refuse_once)
    with structlog.testing.capture_logs() as logs:
        factory.start()
        try:
            wait_for(lambda: list(tmp_path.glob("shard-0.*Z.jsonl")), "closed at the retry")
        finally:
            factory.close()
            p.shutdown(RecordingTracker())
    [failed] = [e for e in logs if e["event"] == "jsonl_rotate_failed"]
    assert failed["shard"] == 0 and "Read-only file system" in failed["error"], failed
    [closed] = tmp_path.glob("shard-0.*Z.jsonl")
    assert ids(closed) == list(range(5))


def test_a_crash_between_rotation_and_compression_is_finished_at_start(tmp_path: Path) -> None:
    left = tmp_path / "shard-1.20260101T000000.000000Z.jsonl"
    left.write_bytes(batch(0, 3).jsonl())
    p = JsonlFactory({"path": str(tmp_path), "compress": "gzip"})(1)
    p.initialize(1)
    p.wait_compressed()
    p.shutdown(RecordingTracker())
    assert not left.exists()
    assert gzip.decompress(left.with_name(left.name + ".gz").read_bytes()) == batch(0, 3).jsonl()


def test_a_failed_rotation_fails_the_batch_before_writing_and_is_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = JsonlFactory({"path": str(tmp_path), "rotate_bytes": 100})(0)
    p.initialize(0)
    p.process(batch(0, 5), RecordingTracker())
    real = os.rename

    def refuse(src: object, dst: object) -> None:
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(os, "rename", refuse)
    with pytest.raises(OSError, match="Read-only"):
        p.process(batch(5, 5), RecordingTracker())
    monkeypatch.setattr(os, "rename", real)
    p.process(batch(5, 5), RecordingTracker())
    p.shutdown(RecordingTracker())
    [closed] = tmp_path.glob("shard-0.*Z.jsonl")
    assert ids(closed) == list(range(5))
    assert ids(tmp_path / "shard-0.jsonl") == list(range(5, 10))


def test_its_series_count_bytes_rotations_and_compress_failures(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    factory = JsonlFactory({"path": str(tmp_path), "rotate_bytes": 1, "compress": "gzip"})
    factory.bind(make_context(metrics_registry=registry))

    def value(name: str) -> float | None:
        return registry.get_sample_value(name)

    # A closed file a crash left behind, whose compressed file's place is taken: compressing
    # it fails (and is tried again at each rotation).
    stuck = tmp_path / "shard-0.20260101T000000.000000Z.jsonl"
    stuck.write_text('{"id": "old"}\n')
    (tmp_path / (stuck.name + ".gz.part")).mkdir()
    p = factory(0)
    p.initialize(0)
    p.wait_compressed()
    assert value("loghubd_jsonl_compress_failures_total") == 1
    first, second = batch(0, 5), batch(5, 5)
    p.process(first, RecordingTracker())
    p.process(second, RecordingTracker())  # rotate_bytes = 1: the first file is closed
    p.wait_compressed()
    p.shutdown(RecordingTracker())
    assert value("loghubd_jsonl_written_bytes_total") == len(first.jsonl()) + len(second.jsonl())
    assert value("loghubd_jsonl_rotated_files_total") == 1
    assert value("loghubd_jsonl_compress_failures_total") == 2  # the stuck file, again
    assert stuck.exists()  # left as it is, nothing lost


def test_a_replay_writes_each_dead_letter_to_a_file_of_its_own_once(tmp_path: Path) -> None:
    """Under `loghubd dead-letters replay` each dead letter becomes
    `shard-<n>.replay-<start>-<end>.jsonl`, written whole and renamed: a replay run again
    (interrupted before it removed the letter) replaces the file, it does not add the lines a
    second time; the shard's live file is not touched."""
    live = JsonlProcessor(tmp_path, 0)
    live.initialize(0)
    live.process(batch(0, 3), RecordingTracker())
    live.shutdown(RecordingTracker())
    before = (tmp_path / "shard-0.jsonl").read_bytes()

    raw = batch(100, 4).raw
    letter = Batch(0, cursors.from_seq(0, 40), cursors.from_seq(0, 41), raw, 1)
    for _ in range(2):
        factory = JsonlFactory({"path": str(tmp_path)})
        factory.bind(make_context(replay=True))
        p, tracker = factory(0), RecordingTracker()
        p.initialize(0)
        p.process(letter, tracker)
        p.shutdown(RecordingTracker())
        assert tracker.finished
    (replayed,) = tmp_path.glob("shard-0.replay-*.jsonl")
    start, end = cursors.decode(letter.cursor), cursors.decode(letter.next_cursor)
    assert replayed.name == f"shard-0.replay-{start}-{end}.jsonl"
    assert replayed.read_bytes() == letter.jsonl()
    assert ids(replayed) == [100, 101, 102, 103]
    assert (tmp_path / "shard-0.jsonl").read_bytes() == before
    assert not [name for name in os.listdir(tmp_path) if name.endswith((".tmp", ".part"))]


def test_two_replays_of_one_letter_at_once_each_write_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two `dead-letters replay` runs over the same letter at once (two operators, or a
    replay started again while the first still runs): each writes its own temporary file, so
    neither truncates nor renames the other's, and the file ends whole. A write that fails
    leaves no temporary file and the file of an earlier replay as it was."""
    raw = batch(100, 4).raw
    letter = Batch(0, cursors.from_seq(0, 40), cursors.from_seq(0, 41), raw, 1)

    def replayer() -> JsonlProcessor:
        factory = JsonlFactory({"path": str(tmp_path)})
        factory.bind(make_context(replay=True))
        p = factory(0)
        p.initialize(0)
        return p

    nested: list[bool] = []

    def interleaved(self: Batch, fd: int, max_bytes: int = 1 << 20) -> int:
        data = self.jsonl()
        os.write(fd, data[: len(data) // 2])
        if not nested:  # the other replay runs in between, from start to end
            nested.append(True)
            replayer().process(letter, RecordingTracker())
        os.write(fd, data[len(data) // 2 :])
        return len(data)

    monkeypatch.setattr(Batch, "write_jsonl", interleaved)
    replayer().process(letter, RecordingTracker())
    (replayed,) = tmp_path.glob("shard-0.replay-*.jsonl")
    assert replayed.read_bytes() == letter.jsonl()

    def failing(self: Batch, fd: int, max_bytes: int = 1 << 20) -> int:
        os.write(fd, b'{"half": ')
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Batch, "write_jsonl", failing)
    with pytest.raises(OSError, match="No space"):
        replayer().process(letter, RecordingTracker())
    assert replayed.read_bytes() == letter.jsonl()
    assert not [name for name in os.listdir(tmp_path) if name.endswith((".tmp", ".part"))]
