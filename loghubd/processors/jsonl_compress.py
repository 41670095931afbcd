"""Compressing a `jsonl` shard's closed files (docs/jsonl.md), in a thread of its own.

Compression of a big file takes seconds; done between batches under the processor's lock it
held up `flush()`, so every checkpoint commit waited for it, and a shutdown that hit it
skipped its last commit (the batches after the last commit were delivered again). Here it
runs beside the writes: `wake()` after each rotation (and once at start, for the files a
crash or a stop left uncompressed) and returns at once. `stop()` at shutdown abandons a
compression in progress within a chunk (1 MiB) and removes its `.part` file; the closed file
stays and is compressed at the next start. A crash mid-compression leaves the same: the
`.part` file is written again from the start.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, Protocol

import structlog
from prometheus_client import Counter

from loghubd import files

log = structlog.get_logger("loghubd.processors.jsonl")

SUFFIXES = {"gzip": ".gz", "zstd": ".zst"}
GZIP_LEVEL = 6  # gzip's own default (9) is several times slower for a few % smaller files
ZSTD_LEVEL = 3  # zstd's default
CHUNK = 1 << 20


class _Writer(Protocol):
    def write(self, data: bytes, /) -> int: ...


class Abandoned(Exception):
    """The processor is shutting down (or, for a shard no processor holds, a processor wants
    it): leave the rest for whoever compresses next."""


class Compressor:
    """One shard's closed files, `shard-<shard>.<time>Z.jsonl`, compressed to `<name>.gz` or
    `<name>.zst` (written as `<name>.<suffix>.part`, renamed when whole), the uncompressed
    file removed then. Only the processor that holds the shard runs one, or the factory's
    look at a shard no processor holds, under the shard's lock (`jsonl_unheld`)."""

    def __init__(
        self,
        directory: Path,
        shard: int,
        method: str,
        sync: bool,
        failures: Counter,
        *,
        abandon: Callable[[], str | None] = lambda: None,
    ) -> None:
        self.directory, self.shard, self.method, self.sync = directory, shard, method, sync
        self.failures = failures
        # Why to give up now, if at all (asked between chunks), besides `stop()`: for a look
        # at a shard no processor holds (`jsonl_unheld`).
        self._abandon = abandon
        self._cond = threading.Condition()
        self._asked = self._done = 0  # wake() calls asked for, and answered by a pass
        self._stopping = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.method == "none":
            return
        self._thread = threading.Thread(
            target=self._run, name=f"jsonl-compress-{self.shard}", daemon=True
        )
        self._thread.start()
        self.wake()

    def wake(self) -> None:
        """Compress what is closed now, soon; never waits."""
        with self._cond:
            self._asked += 1
            self._cond.notify_all()

    def wait_idle(self) -> None:
        """Wait until every file closed before this call was compressed (or failed to be)."""
        with self._cond:
            want = self._asked
            while self._thread is not None and self._done < want and not self._stopping:
                self._cond.wait()

    def stop(self) -> None:
        """Abandon what is in progress (within a chunk) and end the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._done == self._asked and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                asked = self._asked
            try:
                self.compress_closed()
            except Abandoned:
                return
            except Exception as e:  # never let the thread die: the next wake() tries again
                self.failures.inc()
                log.error("jsonl_compress_failed", shard=self.shard, error=repr(e))
            with self._cond:
                self._done = asked
                self._cond.notify_all()

    def compress_closed(self) -> None:
        """Every closed, not yet compressed file of this shard, oldest first. A failure is
        logged and counted, and tried again at the next rotation or start."""
        for closed in sorted(self.directory.glob(f"shard-{self.shard}.*Z.jsonl")):
            target = closed.with_name(closed.name + SUFFIXES[self.method])
            part = target.with_name(target.name + ".part")
            try:
                with open(closed, "rb") as src, open(part, "wb") as raw:
                    self._compress(src, raw, closed.name)
                    raw.flush()
                    if self.sync:
                        os.fsync(raw.fileno())
                os.rename(part, target)
                if self.sync:
                    files.fsync_dir(self.directory)
                closed.unlink()
            except Abandoned as why:
                part.unlink(missing_ok=True)
                log.info("jsonl_compress_abandoned", path=str(closed), reason=str(why))
                raise
            except OSError as e:
                with contextlib.suppress(OSError):  # the failure is reported below, not this
                    part.unlink(missing_ok=True)
                self.failures.inc()
                log.warning("jsonl_compress_failed", path=str(closed), error=str(e))
                return

    def _compress(self, src: BinaryIO, raw: BinaryIO, name: str) -> None:
        if self.method == "gzip":
            with gzip.GzipFile(name, "wb", GZIP_LEVEL, raw) as out:
                self._copy(src, out)
        else:
            # Imported here: every daemon loads this module, few compress with zstd.
            import zstandard

            cctx = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
            try:
                with cctx.stream_writer(raw, closefd=False) as zout:
                    self._copy(src, zout)
            except zstandard.ZstdError as e:  # reported and retried as a failed write is
                raise OSError(f"zstd: {e}") from e

    def _copy(self, src: BinaryIO, out: _Writer) -> None:
        while chunk := src.read(CHUNK):
            if self._stopping:
                raise Abandoned("shutdown")
            if (why := self._abandon()) is not None:
                raise Abandoned(why)
            out.write(chunk)
