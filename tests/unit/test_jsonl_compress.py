"""Compression of closed `jsonl` files runs beside the writes: a long gzip holds up neither the
next batch nor `flush()` (every checkpoint commit), and a shutdown abandons it cleanly (the
next start does it)."""

from __future__ import annotations

import gzip
import json
import threading
from pathlib import Path

import pytest

from loghubd.processors.jsonl import JsonlFactory, JsonlProcessor
from loghubd.testing import RecordingTracker, make_batch

RELEASE_AFTER_S = 10.0  # frees a compression a broken build waits on: the test fails, not hangs


def logs(first: int, count: int) -> list[dict[str, str]]:
    return [{"i": str(n), "pad": "x" * 200} for n in range(first, first + count)]


def ids(data: bytes) -> list[int]:
    return [int(json.loads(line)["i"]) for line in data.splitlines()]


def test_a_long_compression_holds_up_neither_the_next_batch_nor_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = JsonlFactory({"path": str(tmp_path), "rotate_bytes": 600, "compress": "gzip"})(0)
    p.initialize(0)
    p.process(make_batch(logs(0, 3)), RecordingTracker())  # > 600 bytes: the next one rotates
    started, release = threading.Event(), threading.Event()
    real_write = gzip.GzipFile.write

    def held(self: gzip.GzipFile, data: bytes) -> int:
        started.set()
        release.wait()
        return real_write(self, data)

    monkeypatch.setattr(gzip.GzipFile, "write", held)
    timer = threading.Timer(RELEASE_AFTER_S, release.set)
    timer.start()
    try:
        tracker = RecordingTracker()
        rotating = threading.Thread(target=p.process, args=(make_batch(logs(3, 1)), tracker))
        rotating.start()  # closes the first file, whose compression then waits on `release`
        assert started.wait(60)
        p.flush()  # what every checkpoint commit does first
        flushed_while_compressing = not release.is_set()
        rotating.join()
        processed_while_compressing = not release.is_set()
        p.process(make_batch(logs(4, 1)), tracker)
    finally:
        release.set()
        timer.cancel()
    assert flushed_while_compressing and processed_while_compressing
    assert tracker.saved == [False, False]
    p.wait_compressed()
    p.shutdown(RecordingTracker())
    [closed] = tmp_path.glob("shard-0.*Z.jsonl.gz")
    assert closed.read_bytes()[8] == 0  # gzip's XFL: not level 9 (2), the default 6
    assert ids(gzip.decompress(closed.read_bytes())) == [0, 1, 2]
    assert ids((tmp_path / "shard-0.jsonl").read_bytes()) == [3, 4]


def test_a_shutdown_abandons_a_compression_and_the_next_start_does_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    options = {"path": str(tmp_path), "rotate_bytes": 100, "compress": "gzip"}
    live = tmp_path / "shard-0.jsonl"
    live.write_bytes(make_batch(logs(0, 10_000)).jsonl())  # ~2.6 MB: more than one chunk
    p: JsonlProcessor = JsonlFactory(options)(0)
    p.initialize(0)
    content = live.read_bytes()
    real_write = gzip.GzipFile.write
    shutting = threading.Thread(target=p.shutdown, args=(RecordingTracker(),))
    asked_to_stop = threading.Event()

    def shut_down_meanwhile(self: gzip.GzipFile, data: bytes) -> int:
        if not shutting.is_alive() and shutting.ident is None:
            shutting.start()
            compressor = p._compressor
            with compressor._cond:  # until the shutdown has asked the compression to stop
                compressor._cond.wait_for(lambda: compressor._stopping)
            asked_to_stop.set()
        return real_write(self, data)

    monkeypatch.setattr(gzip.GzipFile, "write", shut_down_meanwhile)
    p.process(make_batch(logs(10_000, 1)), RecordingTracker())  # rotates
    assert asked_to_stop.wait(60)
    shutting.join()
    monkeypatch.setattr(gzip.GzipFile, "write", real_write)
    [closed] = tmp_path.glob("shard-0.*Z.jsonl")
    assert closed.read_bytes() == content  # left whole for the next start
    assert sorted(f.name for f in tmp_path.iterdir() if not f.name.startswith(".")) == [
        closed.name,
        "shard-0.jsonl",
    ]  # no .gz, no .gz.part
    again = JsonlFactory(options)(0)
    again.initialize(0)
    again.wait_compressed()
    again.shutdown(RecordingTracker())
    assert not closed.exists()
    gz = closed.with_name(closed.name + ".gz")
    assert gzip.decompress(gz.read_bytes()) == content


def test_a_failed_zstd_compression_keeps_the_file_counts_it_and_is_done_at_the_next_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """zstd's own errors are failures like a disk's: the closed file stays whole, its `.part`
    goes, the failure is counted, and the next start compresses it."""
    import zstandard

    options = {"path": str(tmp_path), "rotate_bytes": 100, "compress": "zstd"}
    real_writer = zstandard.ZstdCompressor.stream_writer

    class Broken:
        def __init__(self, *args: object, **kwargs: object) -> None:
            pass

        def __enter__(self) -> Broken:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def write(self, data: bytes) -> int:
            raise zstandard.ZstdError("compression error: simulated")

    monkeypatch.setattr(zstandard.ZstdCompressor, "stream_writer", Broken)
    p: JsonlProcessor = JsonlFactory(options)(0)
    p.initialize(0)
    # The pass every start runs (for files a crash left) must be over before the rotation:
    # on a busy machine it could otherwise see the closed file and fail on it too.
    p.wait_compressed()
    p.process(make_batch(logs(0, 3)), RecordingTracker())
    p.process(make_batch(logs(3, 1)), RecordingTracker())  # rotates: the compression fails
    p.wait_compressed()
    assert p.metrics.compress_failures._value.get() == 1
    p.shutdown(RecordingTracker())
    [closed] = tmp_path.glob("shard-0.*Z.jsonl")
    assert ids(closed.read_bytes()) == [0, 1, 2]
    assert not list(tmp_path.glob("*.part"))
    monkeypatch.setattr(zstandard.ZstdCompressor, "stream_writer", real_writer)
    again = JsonlFactory(options)(0)
    again.initialize(0)
    again.wait_compressed()
    again.shutdown(RecordingTracker())
    [zst] = tmp_path.glob("shard-0.*Z.jsonl.zst")
    data = zstandard.ZstdDecompressor().decompressobj().decompress(zst.read_bytes())
    assert ids(data) == [0, 1, 2]
