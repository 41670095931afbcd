"""The `jsonl` processor: one file of JSON lines per shard, safe to retry, optionally rotated
and compressed (docs/jsonl.md).

Each batch is written by `Batch.write_jsonl()`: the lines of `Batch.jsonl_chunks()`, about
1 MiB at a time, built from the wire bytes and written from the encoder's own buffer, so memory
does not grow with the batch. A batch whose write fails (a full disk, an I/O
error) leaves the file as it was: the file is cut back to where the batch began, at once and
again before the retry, so a retried batch never follows a torn line or a partial copy of
itself. The shard's checkpoint is saved only after the whole batch is written, and made
durable (fsync) before it is committed, unless `fsync = "never"`. The torn line a crash
mid-write leaves is cut when the shard's file is opened. The files of shards that no
processor holds (moved away, merged) are looked after by the factory (`jsonl_unheld`).

Rotation happens between batches, before a batch is written: a failure there fails the batch
before any of it is written (the retry starts clean). With `rotate_seconds`, a clock (the
factory's `Ticker`) closes the file of a shard that gets no batches once it is due, under the
same lock as `process()`. Closed files are named
`shard-<shard>.<UTC time of closing, %Y%m%dT%H%M%S.%fZ>.jsonl` (`.gz` / `.zst` appended once
compressed), so that sorting the names sorts them in write order. They are compressed in a
thread of their own (`jsonl_compress`), never under the lock `process()` and `flush()` share.

One processor at a time writes a directory's shard: `initialize()` takes an exclusive `flock`
on `<path>/.shard-<shard>.lock`, held until `shutdown()` (or the process's end), and fails
the start if another processor holds it (another source with the same path, another daemon).

Under `loghubd dead-letters replay` (`context.replay`) each dead letter gets a file of its own,
`shard-<shard>.replay-<start>-<end>.jsonl` (its cursor and next cursor as the decimal numbers
they encode), written whole under a hidden temporary name (`files.write_atomically`) and
renamed: a replay run again replaces the file with the same lines instead of appending them a
second time.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, Counter

from loghubd import files
from loghubd.errors import describe_error
from loghubd.models import Batch
from loghubd.plugins.api import ProcessorContext, Tracker
from loghubd.processors.file_errors import doing
from loghubd.processors.jsonl_compress import Abandoned, Compressor
from loghubd.processors.jsonl_unheld import (
    ShardClaims,
    closed_path,
    cut_torn_tail,
    lock_path,
    look_after_unheld,
)
from loghubd.processors.options import ConfigError, typed_options
from loghubd.processors.ticker import Members, Ticker
from loghubd.protocol import cursor as cursors

log = structlog.get_logger("loghubd.processors.jsonl")

FSYNC_MODES = ("batch", "interval", "never")
CLOSE_RETRY_S = 5.0  # after a failed close of a quiet shard's file, before the clock tries again
COMPRESSIONS = ("none", "gzip", "zstd")
# With `rotate_seconds`, how often at most the clock looks at the files of shards that no
# processor here holds (every rotate_seconds / 4, at least 1 s apart).
UNHELD_EVERY_MAX_S = 30.0
# How long a starting shard tries for its lock before it fails its start (then retried with
# back-off), and how often.
TAKE_GRACE_S = 1.0
TAKE_POLL_S = 0.05


@dataclass(frozen=True, slots=True)
class JsonlOptions:
    """The `[processor.jsonl]` table (docs/jsonl.md)."""

    # batch: fsync after every batch; interval: before each checkpoint commit (every
    # `checkpoint_interval`; the default, as before these options); never: leave it to the OS
    fsync: str = "interval"
    rotate_bytes: int = 0  # close the file once it holds this many bytes (0: never)
    # close the file this long after this processor opened it (0: never); a restart or a
    # rebalance starts the count again (docs/jsonl.md)
    rotate_seconds: float = 0.0
    compress: str = "none"  # compress each closed file: none, gzip or zstd

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> tuple[Path, JsonlOptions]:
        """Every problem of the table at once, a line each (`ConfigError`): a run of
        check-config per bad key was the audit's complaint."""
        problems: list[str] = []
        given = typed_options(
            "jsonl",
            options,
            {
                "path": str,
                "fsync": str,
                "rotate_bytes": int,
                "rotate_seconds": (int, float),
                "compress": str,
            },
            problems,
        )
        if not options.get("path"):
            problems.append("processor.jsonl.path: required (a directory for the output)")
        fsync = given.get("fsync", "interval")
        if fsync not in FSYNC_MODES:
            problems.append(
                f"processor.jsonl.fsync: one of {', '.join(FSYNC_MODES)}, not {fsync!r}"
            )
        compress = given.get("compress", "none")
        if compress not in COMPRESSIONS:
            problems.append(
                f"processor.jsonl.compress: one of {', '.join(COMPRESSIONS)}, not {compress!r}"
            )
        rotate_bytes = given.get("rotate_bytes", 0)
        rotate_seconds = float(given.get("rotate_seconds", 0))
        if rotate_bytes < 0:  # typed_options refused a bool
            problems.append(
                "processor.jsonl.rotate_bytes: a number of bytes >= 0 (0: never), "
                f"got {rotate_bytes}"
            )
        if rotate_seconds < 0:
            problems.append(
                f"processor.jsonl.rotate_seconds: seconds >= 0 (0: never), got {rotate_seconds:g}"
            )
        if problems:
            raise ConfigError(problems)
        opts = cls(fsync, rotate_bytes, rotate_seconds, compress)
        return Path(options["path"]), opts


class JsonlPathInUse(RuntimeError):
    """Another processor (another source, another daemon) writes this shard's file."""

    def __repr__(self) -> str:
        # The daemon shows a processor's error as its repr (`describe_error`: /status,
        # /readyz, the logs): the message, not `JsonlPathInUse('...')`.
        return str(self)


class JsonlMetrics:
    """The processor's own series on the source's registry (docs/metrics.md). A closed file
    that cannot be compressed stays as it is and is tried again later: counted here, so a
    disk filling with uncompressed files does not go unseen."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.bytes = Counter(
            "loghubd_jsonl_written_bytes_total", "Bytes of JSON lines written", registry=r
        )
        self.rotated = Counter(
            "loghubd_jsonl_rotated_files_total", "Files closed by rotation", registry=r
        )
        self.compress_failures = Counter(
            "loghubd_jsonl_compress_failures_total",
            "Closed files that could not be compressed (tried again at the next rotation)",
            registry=r,
        )


class JsonlProcessor:
    """One shard's file, `<path>/shard-<shard>.jsonl`."""

    def __init__(
        self,
        directory: Path,
        shard: int,
        options: JsonlOptions | None = None,
        metrics: JsonlMetrics | None = None,
        *,
        replay: bool = False,
        open_shards: Members[JsonlProcessor] | None = None,
        claims: ShardClaims | None = None,
    ) -> None:
        self.directory = directory
        self.replay = replay  # dead letters: a file each, never the shard's live file
        self.shard = shard
        self.path = directory / f"shard-{shard}.jsonl"
        self.options = options or JsonlOptions()
        self.metrics = metrics or JsonlMetrics(CollectorRegistry())
        self._fd = -1
        self._lock_fd = -1  # holds the flock on .shard-<shard>.lock while the shard is ours
        # Where a failed batch began: it may have left bytes past it (cut before the next).
        self._torn: int | None = None
        self._opened = 0.0  # time.time() when the open file was opened
        self._closing: Path | None = None  # a rotation's closed file, once renamed, until done
        self._lock = threading.Lock()
        # What the factory's clock looks at: it closes the file of a shard with no batches
        # when it is due (`close_if_due`). And when a close it tried last failed (monotonic).
        self._open_shards = open_shards
        self._claims = claims  # the factory's: its look at unheld shards skips this one
        self._claimed = False
        self._close_failed_at = -CLOSE_RETRY_S
        sync = self.options.fsync != "never"
        failures = self.metrics.compress_failures
        self._compressor = Compressor(directory, shard, self.options.compress, sync, failures)

    def initialize(self, shard: int) -> None:
        with doing("create directory", self.directory):
            self.directory.mkdir(parents=True, exist_ok=True)
        if self.replay:
            return
        if self._claims is not None and not self._claimed:
            self._claims.hold(self.shard)  # (waits while the factory looks after its files)
            self._claimed = True
        self._take_shard()
        self._compressor.start()  # also what a crash or a stop left uncompressed
        with doing("open", self.path):  # (reading its end: `cut_torn_tail`)
            self._open()
        if self._open_shards is not None:
            self._open_shards.add(self)

    def _take_shard(self) -> None:
        """Two processors appending to one file, each rotating and cutting it back by its own
        count, destroy each other's lines: refuse to start while another holds the shard. The
        daemon retries the start with backoff (right for a shard handed over between
        daemons: the old owner lets go at its shutdown, or at its end, killed or not)."""
        lock = lock_path(self.directory, self.shard)
        # Held for a moment by another process's look at the shards it does not hold
        # (`jsonl_unheld`: `--workers` share a directory): worth a short wait, not a failure.
        deadline = time.monotonic() + TAKE_GRACE_S
        with doing("lock", lock):
            while (fd := files.lock_exclusive(lock)) is None and time.monotonic() < deadline:
                time.sleep(TAKE_POLL_S)
        if fd is None:
            raise JsonlPathInUse(
                f"jsonl: {self.path} is being written by another processor (another source "
                f"with the same processor.jsonl.path, or another daemon: {lock} is locked); "
                "give each source its own path"
            )
        self._lock_fd = fd

    def _keep_shard(self) -> None:
        """Our flock is on the lock file's inode: once that file is removed (the directory
        deleted and made again), a second processor took a new lock file and appended to the
        same file (file sinks audit: 29,010 lines for 16,010 ids). Take the lock again on the
        file that is there now, or fail the batch while another holds it."""
        lock = lock_path(self.directory, self.shard)
        mine = os.fstat(self._lock_fd)
        with contextlib.suppress(FileNotFoundError):
            there = os.stat(lock)
            if (there.st_dev, there.st_ino) == (mine.st_dev, mine.st_ino):
                return
        log.warning("jsonl_lock_taken_again", lock=str(lock), reason="its file was removed")
        with doing("create directory", self.directory):
            self.directory.mkdir(parents=True, exist_ok=True)
        old = self._lock_fd
        self._take_shard()
        os.close(old)

    def _open(self) -> None:
        """Open (or make) the live file and make its name durable: a power cut must not take
        away a file whose batches were checkpointed."""
        fd = self._open_live()
        try:
            self._sync_directory()
        except BaseException:
            os.close(fd)
            raise
        self._use(fd)

    def _open_live(self) -> int:
        # O_APPEND: every write goes to the end, wherever a truncation left it. O_RDWR: to
        # find the last whole line (`cut_torn_tail`). O_NOFOLLOW: a symlink put in its place
        # is refused, not written through (logs appended to whatever file it points at).
        with doing("open", self.path):
            return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644)

    def _use(self, fd: int) -> None:
        cut_torn_tail(fd, self.path)
        self._fd = fd
        self._opened = time.time()

    def process(self, batch: Batch, tracker: Tracker) -> None:
        if self.replay:
            self._write_replayed(batch)
            tracker.save_checkpoint(persist=False)
            return
        # Whatever fails in here fails the batch, and is what the operator sees of it (the
        # steps of a rotation say which of them failed).
        with self._lock, doing("write", self.path):
            if self._closing is None:
                self._follow_path()
            # The file's real size, not a count of ours: logrotate's copytruncate may have
            # emptied it, and cutting back to a count past its end would fill it with NULs.
            start = os.fstat(self._fd).st_size
            if self._torn is not None:  # the retry of a failed batch: cut what it left first
                start = min(start, self._torn)
                os.ftruncate(self._fd, start)
                self._torn = None
            if self._closing is not None or self._rotation_due(start):
                self._rotate()
                start = os.fstat(self._fd).st_size
            try:
                written = self._write(batch)
                if not os.fstat(self._fd).st_nlink:
                    # Removed after `_follow_path` looked, while this batch was written: it
                    # went to a file nobody can read. Written again, to a new file.
                    self._follow_path()
                    start = os.fstat(self._fd).st_size
                    written = self._write(batch)
            except BaseException:
                self._torn = start
                self._cut_back()
                raise
        self.metrics.bytes.inc(written)
        tracker.save_checkpoint(persist=False)

    def _write(self, batch: Batch) -> int:
        written = batch.write_jsonl(self._fd)
        if self.options.fsync == "batch":
            os.fsync(self._fd)
        return written

    def _follow_path(self) -> None:
        """If an outside rotation (logrotate's rename and create, or a removal) took the live
        file away, writing on would go to a file nobody reads, or a deleted one, with the
        checkpoints saved: open `shard-<shard>.jsonl` again (a new file if there is none)."""
        self._keep_shard()
        mine = os.fstat(self._fd)
        try:
            there = os.stat(self.path)
            if mine.st_nlink and (there.st_dev, there.st_ino) == (mine.st_dev, mine.st_ino):
                return
            why = "replaced"
        except FileNotFoundError:
            why = "removed"
        log.warning("jsonl_file_reopened", path=str(self.path), reason=why)
        with doing("create directory", self.directory):  # removed with the file, perhaps
            self.directory.mkdir(parents=True, exist_ok=True)
        old = self._fd
        if self._torn is not None:  # a failed batch's part stays out of the file it was in
            self._cut_back()
            self._torn = None
        self._open()
        try:
            if self.options.fsync != "never":  # its batches' checkpoints may not be committed
                os.fsync(old)  # yet, and the next flush() syncs only the new file
        finally:
            os.close(old)

    def _write_replayed(self, batch: Batch) -> None:
        """A dead letter into a file of its own, named by its range: whole or not at all."""
        try:
            start, end = cursors.decode(batch.cursor), cursors.decode(batch.next_cursor)
        except cursors.InvalidCursorString as exc:
            raise ValueError(f"jsonl: cannot name a file after cursor {batch.cursor!r}") from exc
        final = self.directory / f"shard-{self.shard}.replay-{start}-{end}.jsonl"
        # Two replays of the same letter at once each write a temporary file of their own.
        sync = self.options.fsync != "never"
        with doing("write", final):
            written = files.write_atomically(final, batch.write_jsonl, sync=sync)
        self.metrics.bytes.inc(written)

    def _cut_back(self) -> None:
        """Remove a failed batch's partial write now (shrinking needs no free space); if even
        that fails, the retry does it before writing."""
        if self._torn is None:
            return
        try:
            os.ftruncate(self._fd, min(self._torn, os.fstat(self._fd).st_size))
            self._torn = None
        except OSError as e:
            log.warning("jsonl_truncate_failed", path=str(self.path), error=str(e))

    def _rotation_due(self, size: int) -> bool:
        o = self.options
        if size == 0:
            return False
        if o.rotate_bytes and size >= o.rotate_bytes:
            return True
        return bool(o.rotate_seconds) and time.time() - self._opened >= o.rotate_seconds

    def _rotate(self) -> None:
        """Close the file under its final name and open a new, empty one. Restartable: a step
        that fails fails the batch (before any of it is written), and the retry goes on from
        the step it reached; the old file stays open, and the one written to, until the new
        one is in place, so a failure never leaves the shard without a file."""
        if self._closing is None:
            if self.options.fsync != "never":
                with doing("sync", self.path):
                    os.fsync(self._fd)
            closed = closed_path(self.directory, self.shard)
            # Renamed while still open: if the rename fails, nothing changed.
            with doing("rename", self.path, to=closed):
                os.rename(self.path, closed)
            self._closing = closed
        new = self._open_live()  # again at a retry: O_CREAT finds the empty file if made
        try:
            self._sync_directory()  # the closed file's new name and the new file's
        except BaseException:
            os.close(new)
            raise
        old, closed = self._fd, self._closing
        self._use(new)
        self._closing = None
        os.close(old)
        log.info("jsonl_rotated", shard=self.shard, closed=str(closed))
        self.metrics.rotated.inc()
        self._compressor.wake()

    def close_if_due(self) -> None:
        """`rotate_seconds` for a shard with no batches, called by the factory's clock: close
        the file once it has been open that long. Without it a quiet shard's last lines sat
        in the live file until its next batch, for ever if none came, and an uploader taking
        closed files never saw them. Nothing is done while a failed batch waits for its
        retry (the retry cuts its part off first), nor within `CLOSE_RETRY_S` of a close
        that failed; a failure is logged (`jsonl_rotate_failed`) and tried again."""
        if time.monotonic() - self._close_failed_at < CLOSE_RETRY_S:
            return
        try:
            with self._lock, doing("close", self.path):
                if self._fd < 0 or self._torn is not None:
                    return
                if self._closing is None:
                    self._follow_path()
                    if not self._rotation_due(os.fstat(self._fd).st_size):
                        return
                self._rotate()
        except Exception as exc:
            self._close_failed_at = time.monotonic()
            log.warning("jsonl_rotate_failed", shard=self.shard, error=describe_error(exc))

    def wait_compressed(self) -> None:
        """Wait until the files closed so far are compressed (or failed to be): for tests."""
        self._compressor.wait_idle()

    def _sync_directory(self) -> None:
        if self.options.fsync != "never":
            with doing("sync directory", self.directory):
                files.fsync_dir(self.directory)

    def flush(self) -> None:
        """fsync, before the shard's checkpoint is committed. On a duplicate of the file
        descriptor, outside the lock: `process()` goes on writing while the disk syncs (an
        fsync on a busy disk can take seconds), and what it writes meanwhile is covered by
        the next flush, as its checkpoint is."""
        if self.options.fsync == "never":
            return
        with self._lock:
            if self._fd < 0:
                return
            fd = os.dup(self._fd)
        try:
            with doing("sync", self.path):
                os.fsync(fd)
        finally:
            os.close(fd)

    def shutdown(self, tracker: Tracker) -> None:
        if self._open_shards is not None:
            self._open_shards.discard(self)
        self._compressor.stop()  # abandons a compression in progress: redone at the next start
        with self._lock:
            try:
                if self._fd >= 0:
                    try:
                        self._cut_back()
                        if self.options.fsync != "never":
                            with doing("sync", self.path):
                                os.fsync(self._fd)
                    finally:
                        os.close(self._fd)
                        self._fd = -1
            finally:  # last, and whatever failed: the shard is let go once its file is closed
                if self._lock_fd >= 0:
                    os.close(self._lock_fd)
                    self._lock_fd = -1
                if self._claims is not None and self._claimed:
                    self._claims.let_go(self.shard)
                    self._claimed = False


class JsonlFactory:
    def __init__(self, options: Mapping[str, Any]) -> None:
        self.directory, self.options = JsonlOptions.parse(options)
        _probe(self.directory)
        self.metrics = JsonlMetrics(CollectorRegistry())  # bind() puts them on the daemon's
        self.replay = False
        # With `rotate_seconds`, a clock closes the files of shards that get no batches, and
        # (less often) those of shards no processor here holds (`jsonl_unheld`).
        self.open_shards: Members[JsonlProcessor] = Members()
        self.claims = ShardClaims()
        seconds = self.options.rotate_seconds
        self._clock = Ticker("jsonl-rotate", min(1.0, seconds / 4), self._tick) if seconds else None
        self._unheld_every = min(UNHELD_EVERY_MAX_S, max(1.0, seconds / 4))
        self._unheld_at = 0.0  # time.monotonic() of the last look at unheld shards
        self._looking = threading.Lock()  # one look at a time (the start's, the clock's)
        self._first_look: threading.Thread | None = None
        self._stop = threading.Event()

    def bind(self, context: ProcessorContext) -> None:
        self.metrics = context.instruments(JsonlMetrics)
        self.replay = context.replay

    def start(self) -> None:
        """The files of shards no processor holds (a crash's torn lines, with `rotate_seconds`
        stale live files, with `compress` closed files left uncompressed), in a thread of its
        own: a big leftover to compress does not hold up the start; then the clock, if any."""
        if self.replay:
            return
        self._stop.clear()
        self._first_look = threading.Thread(
            target=contextvars.copy_context().run,  # (the source's logging context)
            args=(self._look_after_unheld,),
            name="jsonl-unheld",
            daemon=True,
        )
        self._first_look.start()
        if self._clock is not None:
            self._clock.start()

    def close(self) -> None:
        self._stop.set()  # a compression of an unheld shard's file gives up within a MiB
        if self._clock is not None:
            self._clock.stop()
        if self._first_look is not None:
            self._first_look.join(30)

    def wait_unheld_looked_after(self) -> None:
        """Wait for the start's look at the shards no processor holds: for tests."""
        if self._first_look is not None:
            self._first_look.join()

    def _tick(self) -> None:
        for processor in self.open_shards.now():
            processor.close_if_due()
        if time.monotonic() - self._unheld_at >= self._unheld_every:
            self._look_after_unheld()

    def _look_after_unheld(self) -> None:
        if not self._looking.acquire(blocking=False):
            return  # the start's look is still going (compressing, perhaps)
        try:
            look_after_unheld(
                self.directory,
                self.claims,
                rotate_after=self.options.rotate_seconds,
                compress=self._compress_unheld if self.options.compress != "none" else None,
                sync=self.options.fsync != "never",
                rotated=self.metrics.rotated.inc,
                stopping=self._stop.is_set,
            )
        except Exception as exc:  # (its own per-shard failures are logged there)
            log.warning("jsonl_unheld_shard_failed", error=describe_error(exc))
        finally:
            self._unheld_at = time.monotonic()  # the next look comes `_unheld_every` after
            self._looking.release()

    def _compress_unheld(self, shard: int) -> None:
        def abandon() -> str | None:
            if self._stop.is_set():
                return "the daemon is stopping"
            if self.claims.wanted(shard):
                return "its shard is starting here"
            return None

        o = self.options
        compressor = Compressor(
            self.directory,
            shard,
            o.compress,
            o.fsync != "never",
            self.metrics.compress_failures,
            abandon=abandon,
        )
        with contextlib.suppress(Abandoned):  # (logged: `jsonl_compress_abandoned`)
            compressor.compress_closed()

    def __call__(self, shard: int) -> JsonlProcessor:
        return JsonlProcessor(
            self.directory,
            shard,
            self.options,
            self.metrics,
            replay=self.replay,  # (a replay's processor opens no live file: none to close)
            open_shards=self.open_shards,
            claims=self.claims,
        )


def _probe(directory: Path) -> None:
    """Make the output directory and prove a file can be made there, so that a path that
    cannot be used fails `check-config` and the daemon's start (exit 2, naming the key)
    rather than every shard's start, again and again."""
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"processor.jsonl.path: {directory} is a file, not a directory")
    try:
        files.prove_writable(directory)
    except OSError as exc:
        raise ValueError(
            f"processor.jsonl.path: cannot write to {directory}: {exc.strerror or exc}"
        ) from None
