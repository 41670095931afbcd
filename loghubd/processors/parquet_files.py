"""The `parquet` processor's files: where they live (a local directory or a pyarrow file system
URI), how one write becomes visible exactly once, and how a crashed write is finished or
discarded.

One write (one shard's buffered batches) is, under that shard's lock (an `flock` in the
write-ahead log's directory, so daemons sharing the output take turns per shard):

1. settle: re-read the write-ahead log (loghubd/wal.py); drop the log groups that committed
   writes already hold (the daemon re-delivers what it had not checkpointed before a crash);
2. record a `pending` entry with the batches' exact ranges and the intended renames;
3. write each partition's rows to a hidden temporary file (`.part-....parquet.tmp`) and make
   it durable (fsync on local disks);
4. commit the entry: the renames are now recorded, the ranges are now coverage;
5. rename the temporary files to their final names (atomic on one file system);

and only then are the batches acknowledged, so a checkpoint never passes rows that are not
visible. Recovery (when a shard is granted): a `pending` entry whose writer died is discarded
with its temporary files (nothing of it was visible, and the daemon re-delivers its ranges); a
`committed` entry whose renames did not all happen has them finished. Committed entries wholly
below the position a shard is granted at are deleted: nothing there is ever delivered again.
Each collection first records the shard's floor (loghubd/wal.py): step 1 counts everything
below it as written, so a daemon that lost the shard while paused writes none of it later.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import structlog

from loghubd.arrow import position
from loghubd.config.redact import redact_text
from loghubd.files import fsync_dir, prove_writable
from loghubd.wal import COMMITTED, PENDING, WAL_DIR, Entry, Wal

log = structlog.get_logger("loghubd.parquet")

SHARD_LOCK_TIMEOUT_S = 120.0


@dataclass(frozen=True, slots=True)
class Target:
    """The output: a pyarrow file system, the root directory on it, and the local directory
    of the write-ahead log (`<root>/_loghubd_wal` on a local root by default)."""

    fs: pafs.FileSystem
    root: str
    wal_root: Path
    local: bool


# The URI schemes pyarrow resolves to the local file system: no `wal_dir` needed.
LOCAL_SCHEMES = ("file", "local")


def open_target(path: str, wal_dir: str | None) -> Target:
    """Resolve `path` (a directory, or a URI pyarrow knows: file://, s3://, gs://, hdfs://,
    ...); ValueError naming the key when it cannot be used. The directory is created and a
    probe file is written and removed, so an unwritable path fails at start."""
    if "://" in path:
        if not wal_dir and path.split("://", 1)[0].lower() not in LOCAL_SCHEMES:
            # Said before the URI is resolved: for s3:// that asks the network (the bucket's
            # region), and a missing wal_dir was reported as a DNS error (file sinks audit).
            raise ValueError(
                "processor.parquet.wal_dir: required when path is not on the local file "
                "system (a local directory shared by the daemons of the group)"
            )
        try:
            fs, root = pafs.FileSystem.from_uri(path)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as exc:
            raise ValueError(redact_text(f"processor.parquet.path: {path!r}: {exc}")) from None
        local = isinstance(fs, pafs.LocalFileSystem)
    else:
        fs, root, local = pafs.LocalFileSystem(), str(Path(path).absolute()), True
    wal_root = Path(wal_dir) if wal_dir else Path(root)
    probe = f"{root.rstrip('/')}/.loghubd-probe-{os.getpid()}"
    try:
        fs.create_dir(root, recursive=True)
        with fs.open_output_stream(probe) as out:
            out.write(b"probe")
        fs.delete_file(probe)
    except (OSError, pa.ArrowException) as exc:
        raise ValueError(
            redact_text(f"processor.parquet.path: cannot write to {path!r}: {exc}")
        ) from None
    try:
        prove_writable(wal_root / WAL_DIR)
    except OSError as exc:
        key = "wal_dir" if wal_dir else "path"
        raise ValueError(f"processor.parquet.{key}: cannot write to {wal_root}: {exc}") from None
    return Target(fs, root.rstrip("/"), wal_root, local)


@contextlib.contextmanager
def shard_lock(
    wal: Wal, logstore: str, shard: int, *, timeout: float = SHARD_LOCK_TIMEOUT_S
) -> Iterator[None]:
    """Exclusive per (logstore, shard) across processes; dropped by the kernel on death.
    TimeoutError when another holds it for `timeout` seconds (0: do not wait)."""
    wal.ensure()
    path = wal.dir / f"shard-{logstore}-{shard}.flock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"shard {shard}: {path} held for too long") from None
                time.sleep(0.02)
        yield
    finally:
        os.close(fd)


class WriteOptions(Protocol):
    """What a write takes from the processor's options (parquet.ParquetOptions)."""

    @property
    def compression(self) -> str: ...
    @property
    def compression_level(self) -> int | None: ...
    @property
    def statistics(self) -> bool | tuple[str, ...]: ...
    @property
    def dictionary_page_bytes(self) -> int: ...


def write_file(target: Target, path: str, table: pa.Table, options: WriteOptions) -> None:
    """One Parquet file at `path`, durable when this returns (fsync on a local disk)."""
    kwargs: dict[str, object] = {
        "compression": options.compression,
        "write_statistics": (
            options.statistics if isinstance(options.statistics, bool) else list(options.statistics)
        ),
        "dictionary_pagesize_limit": options.dictionary_page_bytes,
    }
    if options.compression_level is not None:
        kwargs["compression_level"] = options.compression_level
    if target.local:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            pq.write_table(table, f, **kwargs)
            f.flush()
            os.fsync(f.fileno())
    else:
        target.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        with target.fs.open_output_stream(path) as out:
            pq.write_table(table, out, **kwargs)


def rename(target: Target, temporary: str, final: str) -> None:
    """Make one file visible. Finishing a rename someone else did already is a no-op."""
    try:
        target.fs.move(temporary, final)
    except FileNotFoundError:
        if not _exists(target, final):
            raise


def sync_dirs(target: Target, paths: list[str]) -> None:
    if target.local:
        for directory in sorted({str(Path(p).parent) for p in paths}):
            fsync_dir(Path(directory))


def _exists(target: Target, path: str) -> bool:
    return bool(target.fs.get_file_info(path).type != pafs.FileType.NotFound)


def _delete(target: Target, path: str) -> None:
    try:
        target.fs.delete_file(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        if exc.errno != errno.ENAMETOOLONG:  # a name no file can have: nothing to delete
            raise


def remove_temporaries(target: Target, entry: Entry | None) -> None:
    """Delete an abandoned write's temporary files (its final files were never made): each
    one tried; the first error is raised after the others were."""
    if entry is None:
        return
    failed: OSError | None = None
    for temporary, _final in entry.renames:
        try:
            _delete(target, temporary)
        except OSError as exc:
            log.warning("parquet_temporary_left", path=temporary, error=repr(exc)[:500])
            failed = failed or exc
    if failed is not None:
        raise failed


def recover(target: Target, wal: Wal, shard: int) -> tuple[int, int]:
    """Finish or discard the writes of `shard` that a crashed writer left; call it holding the
    shard's lock. Returns (renames finished, writes discarded)."""
    finished = discarded = 0
    if not wal.dir.exists():
        return 0, 0
    for item in sorted(wal.dir.glob("*.json")):
        entry = wal.read(item.stem)
        if (
            entry is None
            or entry.sink != "parquet"
            or (entry.project, entry.logstore)
            != (
                wal.project,
                wal.logstore,
            )
        ):
            continue
        if not any(r.shard == shard for r in entry.ranges):
            continue
        if entry.state == COMMITTED:
            for temporary, final in entry.renames:
                if _exists(target, temporary):
                    rename(target, temporary, final)
                    finished += 1
            if finished:
                sync_dirs(target, [f for _, f in entry.renames])
        elif entry.state == PENDING:
            lease = wal.try_lock(entry)
            if lease is None:
                continue  # a live writer (a daemon that has not noticed it lost the shard)
            # Its remove callback deletes the temporary files. What cannot be deleted is
            # logged and the entry kept for the next recovery: the shard still starts.
            wal.abandon_quietly(lease)
            discarded += 1
    return finished, discarded


def collect_garbage(wal: Wal, shard: int, granted_at: str) -> int:
    """Delete committed entries of `shard` wholly below where it was granted, recording that
    position as the shard's floor first (call it holding the shard's lock)."""
    floor = position(granted_at)
    if floor is None:
        return 0
    return wal.gc({shard: floor}, record_floor=True)
