"""The `jsonl` files of shards that no processor of the directory holds (docs/jsonl.md, "Shards
that moved away").

A processor looks after its own shard's files: it cuts the torn line a crash left when it opens
the live file, closes the file after `rotate_seconds`, and compresses what is closed. A shard
that moves to a daemon writing another directory (another host, another `path`), or that is
merged away, is never opened here again, so until now its file kept a crash's torn line (every
reader of the file failed on it), its last lines stayed in the live file (an uploader taking
closed files never saw them), and a closed file a crash or a stop left uncompressed stayed so.

`look_after_unheld` does for such a shard what its processor would have: in a thread of its own
from the factory's start, and then on the factory's clock when `rotate_seconds` is set. It
takes the shard's lock first (`.shard-<shard>.lock`, without waiting) and leaves a shard whose
lock another source or daemon holds to that writer. `ShardClaims` keeps it from racing this
factory's own processors: it skips a shard one of them holds, and a processor starting a shard
it is looking after waits for it rather than failing its start on the lock (a compression
there gives up within a MiB, and the processor's own compressor does it again).
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import structlog

from loghubd import files

log = structlog.get_logger("loghubd.processors.jsonl")

LIVE = re.compile(r"shard-(\d+)\.jsonl")
CLOSED = re.compile(r"shard-(\d+)\.\d{8}T\d{6}\.\d{6}Z\.jsonl")


def closed_path(directory: Path, shard: int) -> Path:
    """The name a shard's live file is closed under: its time of closing, so that sorting a
    shard's names sorts them in write order."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    return directory / f"shard-{shard}.{stamp}.jsonl"


def lock_path(directory: Path, shard: int) -> Path:
    return directory / f".shard-{shard}.lock"


def cut_torn_tail(fd: int, path: Path) -> None:
    """A crash (kill -9, power cut) mid-batch leaves part of a line at the end of the file;
    appending the batch read again after it would glue its first line to it. That batch was
    never checkpointed (it is read again, by whichever daemon gets the shard next), so the
    file is cut back to just after its last newline."""
    size = end = os.fstat(fd).st_size
    if not size or os.pread(fd, 1, size - 1) == b"\n":
        return
    keep = 0
    while end > 0:
        start = max(0, end - (1 << 16))
        newline = os.pread(fd, end - start, start).rfind(b"\n")
        if newline >= 0:
            keep = start + newline + 1
            break
        end = start
    os.ftruncate(fd, keep)
    log.warning("jsonl_torn_line_removed", path=str(path), removed_bytes=size - keep, kept=keep)


class ShardClaims:
    """Which shards of one directory this factory's processors hold, and which of the others
    `look_after_unheld` is working on. Thread-safe."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._held: set[int] = set()
        self._swept: set[int] = set()
        self._wanted: set[int] = set()  # swept, and a processor waits for it

    def hold(self, shard: int) -> None:
        """A processor starts `shard`: waits while the shard's files are being looked after
        (a compression there gives up within a chunk: `wanted`)."""
        with self._cond:
            if shard in self._swept:
                self._wanted.add(shard)
                while shard in self._swept:
                    self._cond.wait()
                self._wanted.discard(shard)
            self._held.add(shard)

    def let_go(self, shard: int) -> None:
        with self._cond:
            self._held.discard(shard)

    def wanted(self, shard: int) -> bool:
        """Whether a processor waits to start `shard` while it is being looked after."""
        with self._cond:
            return shard in self._wanted

    @contextlib.contextmanager
    def sweeping(self, shard: int) -> Iterator[bool]:
        """True, and `shard` kept from this factory's processors until the block ends; False
        when one of them holds it (or another look has it)."""
        with self._cond:
            free = shard not in self._held and shard not in self._swept
            if free:
                self._swept.add(shard)
        if not free:
            yield False
            return
        try:
            yield True
        finally:
            with self._cond:
                self._swept.discard(shard)
                self._cond.notify_all()


def look_after_unheld(
    directory: Path,
    claims: ShardClaims,
    *,
    rotate_after: float = 0.0,
    compress: Callable[[int], None] | None = None,
    stopping: Callable[[], bool] = lambda: False,
    sync: bool = True,
    rotated: Callable[[], None] = lambda: None,
    now: Callable[[], float] = time.time,
) -> None:
    """For each shard with files here that no processor holds: cut its live file's torn line;
    with `rotate_after` (`rotate_seconds`), close a live file not written for that long; with
    `compress` (called with the shard, under its lock), compress its closed files. Ends
    early once `stopping()`. A shard's failure is logged (`jsonl_unheld_shard_failed`) and
    the others go on: none of this may stop the daemon from consuming."""
    try:
        names = [entry.name for entry in os.scandir(directory)]
    except OSError as exc:
        log.warning("jsonl_unheld_shard_failed", path=str(directory), error=str(exc))
        return
    live = {int(m.group(1)) for m in map(LIVE.fullmatch, names) if m}
    closed = {int(m.group(1)) for m in map(CLOSED.fullmatch, names) if m}
    for shard in sorted(live | (closed if compress is not None else set())):
        if stopping():
            return
        with claims.sweeping(shard) as free:
            if not free:
                continue
            try:
                held = files.lock_exclusive(lock_path(directory, shard))
                if held is None:
                    continue  # another source or daemon writes it: its own processor's care
                try:
                    if shard in live:
                        _live_file(directory, shard, rotate_after, sync, rotated, now)
                    if compress is not None:
                        compress(shard)
                finally:
                    os.close(held)
            except OSError as exc:
                log.warning("jsonl_unheld_shard_failed", shard=shard, error=str(exc))


def _live_file(
    directory: Path,
    shard: int,
    rotate_after: float,
    sync: bool,
    rotated: Callable[[], None],
    now: Callable[[], float],
) -> None:
    path = directory / f"shard-{shard}.jsonl"
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
    except FileNotFoundError:  # closed since the directory was read
        return
    try:
        cut_torn_tail(fd, path)
        st = os.fstat(fd)
        if not rotate_after or not st.st_size or now() - st.st_mtime < rotate_after:
            return
        if sync:
            os.fsync(fd)
        closed = closed_path(directory, shard)
        os.rename(path, closed)
    finally:
        os.close(fd)
    log.info("jsonl_rotated", shard=shard, closed=str(closed), reason="not held")
    rotated()
    if sync:
        files.fsync_dir(directory)
