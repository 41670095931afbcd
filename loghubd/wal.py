"""The write-ahead log that makes file sinks exactly-once across crashes and rebalances.

One mechanism shared by the `parquet` processor (loghubd/processors/parquet.py) and the Spark
processor (plugins/loghubd-spark): a public module of loghubd, for plugins too.

One JSON file per write, `<root>/_loghubd_wal/<batch>.json` (`<wal_dir>/...` when the sink is
not local), written before the write (`pending`) and rewritten after it committed
(`committed`); both atomically (tmp file, fsync, rename, fsync of the directory). An entry
records the exact source ranges its write holds: every daemon batch included, as (shard, start
cursor, next cursor), plus per shard the first start and the last end. A sink that makes its
files visible by rename lists them in `renames` ([temporary, final] pairs): committing the
entry records the intended renames, so that recovery can finish them.

- A `pending` entry whose writer is gone (crashed) is finished by the sink's own recovery: the
  Spark processor re-reads exactly its ranges and rewrites them under the same batch id; the
  parquet processor discards it (its files were never visible; the daemon re-delivers the
  ranges, since the checkpoint never passed them).
- `committed` entries form the *coverage*: per shard, the union of the position intervals
  already in the sink. A batch the daemon delivers again (the crash came after the commit but
  before the checkpoint) is compared against it and only its uncovered log groups are written.

The Spark processor's output partition `batch=<batch>` belongs to its entry alone, so rewriting
it with dynamic partition overwrite is idempotent.

Committed entries wholly behind the checkpoint are collected (`gc`), except a dead-letter
replay's (`Entry.replay`), which lie behind it from the start: they stay `REPLAY_KEEP_S`, so a
replay run again after an interruption finds what it wrote.

A collection leaves no entry behind, so `gc(..., record_floor=True)` first records, per shard,
the checkpoint it collected up to in `floor.<project>.<logstore>.<shard>` (atomically, before
any entry goes): the shard's *floor*. Below it every log group is written or was dead-lettered
by the group, so a writer that still holds such a range (a daemon that was paused while another
took its shard, wrote it and collected its entry) must count it as covered (`floor()`).

While a write is in progress its writer holds an exclusive `flock` on `<batch>.lock`; the kernel
drops it when the process dies (even on `kill -9`), so "pending and unlocked" means "crashed".
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from loghubd.arrow import Span, position
from loghubd.files import atomic_write, fsync_dir, lock_exclusive

log = structlog.get_logger("loghubd.wal")

WAL_DIR = "_loghubd_wal"
PENDING, COMMITTED = "pending", "committed"
# A replay's entries (`Entry.replay`: dead letters written by `loghubd dead-letters replay`)
# lie behind the checkpoint from the start, so the checkpoint cannot tell when they may go:
# `gc` keeps them this long, so that a replay run again after an interruption finds its
# earlier writes and writes nothing twice.
REPLAY_KEEP_S = 30 * 86400.0
# What a writer killed inside `begin` leaves is removed by `gc` this often, once this old.
ORPHAN_SWEEP_S = 600.0
ORPHAN_TMP_AGE_S = 60.0
# The start of the interval a shard's floor covers (positions are never below it).
FLOOR_START = -(2**63)


@dataclass(frozen=True, slots=True)
class Range:
    """Log groups [start, end) of one shard, as SLS cursors."""

    shard: int
    start: str
    end: str

    def positions(self) -> tuple[int, int] | None:
        a, b = position(self.start), position(self.end)
        return None if a is None or b is None else (a, b)


@dataclass(slots=True)
class Entry:
    batch: str
    project: str
    logstore: str
    ranges: list[Range]
    state: str = PENDING
    sink: str = "parquet"
    rows: int = 0
    arrow_bytes: int = 0
    dates: list[str] = field(default_factory=list)  # dt partitions written (known after commit)
    created: float = field(default_factory=time.time)
    committed: float | None = None
    renames: list[tuple[str, str]] = field(default_factory=list)  # [temporary, final] paths
    replay: bool = False  # written by a dead-letter replay: kept by `gc` for REPLAY_KEEP_S

    def shards(self) -> dict[int, dict[str, str]]:
        """Per shard: the first start and the last end cursor (ranges are in stream order)."""
        out: dict[int, dict[str, str]] = {}
        for r in self.ranges:
            span = out.setdefault(r.shard, {"start": r.start, "end": r.end})
            span["end"] = r.end
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            **({"replay": True} if self.replay else {}),
            "version": 1,
            "batch": self.batch,
            "state": self.state,
            "project": self.project,
            "logstore": self.logstore,
            "sink": self.sink,
            "rows": self.rows,
            "arrow_bytes": self.arrow_bytes,
            "dates": self.dates,
            "created": self.created,
            "committed": self.committed,
            "shards": {str(k): v for k, v in sorted(self.shards().items())},
            "batches": [[r.shard, r.start, r.end] for r in self.ranges],
            "renames": [list(pair) for pair in self.renames],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Entry:
        return cls(
            batch=str(data["batch"]),
            project=str(data["project"]),
            logstore=str(data["logstore"]),
            ranges=[Range(int(s), str(a), str(b)) for s, a, b in data["batches"]],
            state=str(data["state"]),
            sink=str(data.get("sink", "parquet")),
            rows=int(data.get("rows", 0)),
            arrow_bytes=int(data.get("arrow_bytes", 0)),
            dates=[str(d) for d in data.get("dates", [])],
            created=float(data.get("created", 0.0)),
            committed=data.get("committed"),
            renames=[(str(a), str(b)) for a, b in data.get("renames", [])],
            replay=bool(data.get("replay", False)),
        )


def new_batch_id() -> str:
    """Unique, sortable by creation time, and a plain partition value (no escaping)."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(6)


class Lease:
    """An exclusive hold on one entry (its lock file), while it is written or recovered."""

    def __init__(self, entry: Entry, fd: int, lock_path: Path) -> None:
        self.entry = entry
        self._fd = fd
        self._lock_path = lock_path

    @property
    def held(self) -> bool:
        return self._fd >= 0

    def release(self, *, remove_lock_file: bool = False) -> None:
        if self._fd < 0:
            return
        try:
            if remove_lock_file:
                with contextlib.suppress(FileNotFoundError):
                    self._lock_path.unlink()
        finally:
            os.close(self._fd)  # drops the flock, whatever the unlink did
            self._fd = -1


def merge(intervals: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(i for i in intervals if i[0] < i[1]):
        if out and a <= out[-1][1]:
            if b > out[-1][1]:
                out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def uncovered(start: int, end: int, covered: Sequence[tuple[int, int]]) -> list[Span]:
    """The parts of [start, end) outside the merged `covered` intervals, relative to start."""
    spans: list[Span] = []
    at = start
    for a, b in covered:
        if b <= at:
            continue
        if a >= end:
            break
        if a > at:
            spans.append((at - start, a - start))
        at = max(at, b)
        if at >= end:
            break
    if at < end:
        spans.append((at - start, end - start))
    return spans


class Wal:
    """The entries of one sink directory that belong to one project/logstore.

    They live in `<root>/_loghubd_wal`, where `root` is the sink's directory, or `wal_dir`
    when the sink is not local. `remove_partitions(batch)` deletes a batch's output
    partitions; by default they are looked for under `root` on the local file system."""

    def __init__(
        self,
        root: Path,
        project: str,
        logstore: str,
        *,
        remove_partitions: Callable[[str], None] | None = None,
    ) -> None:
        self.sink_path = root
        self.dir = root / WAL_DIR
        self._remove_partitions = remove_partitions or self._remove_local_partitions
        self.project, self.logstore = project, logstore
        self._loaded: set[str] = set()  # committed entry files already in the coverage
        # Entries of other logstores sharing the directory: read once, never again (`gc`, after
        # every checkpoint commit, refreshes; their owner never changes).
        self._foreign: set[str] = set()
        # Per loaded committed entry: the end of its ranges per shard (None: a range without
        # positions, never collected). What `gc` decides on, without reading the files again.
        self._ends: dict[str, dict[int, int] | None] = {}
        self._replayed: dict[str, float] = {}  # loaded replay entries: when each was made
        self._coverage: dict[int, list[tuple[int, int]]] = {}
        self._pending: dict[str, Entry] = {}  # pending entries seen at the last refresh
        self._mtime_ns = -1
        self._swept_at = -ORPHAN_SWEEP_S  # monotonic: the last `sweep_orphans`

    def ensure(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)

    def _entry_path(self, batch: str) -> Path:
        return self.dir / f"{batch}.json"

    def _lock_path(self, batch: str) -> Path:
        return self.dir / f"{batch}.lock"

    def floor_path(self, shard: int) -> Path:
        """Not `*.json`: never read as an entry (project and logstore names have no `.`)."""
        return self.dir / f"floor.{self.project}.{self.logstore}.{shard}"

    def _mine(self, entry: Entry) -> bool:
        return entry.project == self.project and entry.logstore == self.logstore

    # -- writing -------------------------------------------------------------------------------

    def try_lock(self, entry: Entry) -> Lease | None:
        """Hold `entry` exclusively, or None if a live process holds it."""
        path = self._lock_path(entry.batch)
        fd = lock_exclusive(path)
        return None if fd is None else Lease(entry, fd, path)

    def begin(self, entry: Entry) -> Lease:
        """Lock, then record `entry` as pending (the lock comes first, so a pending entry with a
        free lock always means a dead writer)."""
        self.ensure()
        lease = self.try_lock(entry)
        if lease is None:
            raise RuntimeError(f"write-ahead entry {entry.batch} is locked by another process")
        try:
            entry.state = PENDING
            atomic_write(self._entry_path(entry.batch), _dump(entry))
        except BaseException:
            lease.release(remove_lock_file=True)
            raise
        return lease

    def rewrite(self, lease: Lease) -> None:
        """Record a changed pending entry (e.g. more ranges before a retried write)."""
        atomic_write(self._entry_path(lease.entry.batch), _dump(lease.entry))

    def commit(self, lease: Lease, dates: Sequence[str] = ()) -> None:
        """The write is in the sink: mark the entry committed, add it to the coverage."""
        entry = lease.entry
        entry.state, entry.committed, entry.dates = COMMITTED, time.time(), sorted(dates)
        atomic_write(self._entry_path(entry.batch), _dump(entry))
        self._pending.pop(entry.batch, None)
        self._add_coverage(entry)
        lease.release(remove_lock_file=True)

    def abandon(self, lease: Lease) -> None:
        """Forget a pending write entirely: its partitions (if any were written) and its entry.

        An OSError deleting them is raised with the lease still held (the caller may try
        again, still owning the entry); a caller that is already failing with an error of its
        own, or recovery, which must not be stopped by it, use `abandon_quietly`."""
        batch = lease.entry.batch
        self._remove_partitions(batch)  # first: a kept entry still lists what is left
        with contextlib.suppress(FileNotFoundError):
            self._entry_path(batch).unlink()
        fsync_dir(self.dir)
        self._pending.pop(batch, None)
        _release(lease)

    def abandon_quietly(self, lease: Lease) -> bool:
        """`abandon`, best effort: an OSError is logged (what was left, and why), not raised,
        and the lease is released whatever happens; an entry left behind is pending with a
        free lock, so a later recovery tries again. True when everything went."""
        try:
            self.abandon(lease)
        except OSError as exc:
            log.warning("wal_abandon_incomplete", batch=lease.entry.batch, error=repr(exc)[:500])
            return False
        finally:
            _release(lease)
        return True

    def _remove_local_partitions(self, batch: str) -> None:
        for part in self.sink_path.glob(f"dt=*/batch={batch}"):
            shutil.rmtree(part, ignore_errors=False)

    # -- reading -------------------------------------------------------------------------------

    def refresh(self, *, force: bool = False) -> None:
        """Load entries written or committed since the last refresh (by any process)."""
        try:
            mtime = self.dir.stat().st_mtime_ns
        except FileNotFoundError:
            return
        if not force and mtime == self._mtime_ns and not self._pending:
            return
        self._mtime_ns = mtime
        seen: set[str] = set()
        for item in os.scandir(self.dir):
            name = item.name
            if name.startswith(".") or not name.endswith(".json"):
                continue
            batch = name[: -len(".json")]
            seen.add(batch)
            if batch in self._loaded or batch in self._foreign:
                continue
            entry = self.read(batch)
            if entry is None:
                continue
            if not self._mine(entry):
                self._foreign.add(batch)
                continue
            if entry.state == COMMITTED:
                self._pending.pop(batch, None)
                self._add_coverage(entry)
            else:
                self._pending[batch] = entry
        for batch in list(self._pending):
            if batch not in seen:
                del self._pending[batch]  # abandoned by its writer
        for batch in self._loaded - seen:  # collected (by anyone): its coverage stays
            self._loaded.discard(batch)
            self._ends.pop(batch, None)
            self._replayed.pop(batch, None)
        self._foreign &= seen

    def read(self, batch: str) -> Entry | None:
        try:
            return Entry.from_json(json.loads(self._entry_path(batch).read_bytes()))
        except FileNotFoundError:
            return None

    def pending(self) -> list[Entry]:
        """Pending entries of this logstore (any writer's, live or dead), oldest first."""
        return sorted(self._pending.values(), key=lambda e: (e.created, e.batch))

    def _add_coverage(self, entry: Entry) -> None:
        """A committed entry joins the coverage (and what `gc` knows of it)."""
        by_shard: dict[int, list[tuple[int, int]]] = {}
        ends: dict[int, int] | None = {}
        for r in entry.ranges:
            pos = r.positions()
            if pos is None:
                ends = None
                continue
            by_shard.setdefault(r.shard, []).append(pos)
            if ends is not None:
                ends[r.shard] = max(ends.get(r.shard, pos[1]), pos[1])
        for shard, intervals in by_shard.items():
            self._coverage[shard] = merge([*self._coverage.get(shard, []), *intervals])
        self._loaded.add(entry.batch)
        self._ends[entry.batch] = ends
        if entry.replay:
            self._replayed[entry.batch] = entry.created

    def coverage(self, shard: int, *, below_floor: bool = False) -> list[tuple[int, int]]:
        """The intervals of `shard` committed writes hold; with `below_floor`, also everything
        below the shard's floor (what collected entries held: a daemon that lost the shard
        while paused must not write it again). A dead-letter replay leaves the floor out: the
        letters it writes lie below it and were never written."""
        covered = list(self._coverage.get(shard, []))
        floor = self.floor(shard) if below_floor else None
        return covered if floor is None else merge([*covered, (FLOOR_START, floor)])

    def floor(self, shard: int) -> int | None:
        """The position below which `gc` collected this shard's entries (None: never): every
        log group below it is in the sink or was dead-lettered. Read from disk each time (any
        process may raise it); read it holding the shard's writer lock."""
        path = self.floor_path(shard)
        try:
            data = json.loads(path.read_bytes())
            return int(data["position"])
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}: not a write-ahead floor ({exc!r})") from None

    def _raise_floor(self, shard: int, at: int) -> None:
        """Record `at` as the shard's floor, durably, unless it is already that high."""
        current = self.floor(shard)
        if current is not None and current >= at:
            return
        data = {
            "version": 1,
            "project": self.project,
            "logstore": self.logstore,
            "shard": shard,
            "position": at,
            "updated": time.time(),
        }
        atomic_write(self.floor_path(shard), (json.dumps(data) + "\n").encode())

    def uncovered(self, shard: int, start: int, end: int) -> list[Span]:
        """Which log groups of [start, end) (relative indices) no committed write holds yet."""
        return uncovered(start, end, self._coverage.get(shard, []))

    def overlaps_pending(self, shard: int, start: int, end: int) -> list[Entry]:
        """Pending entries (of other writers) holding any of [start, end) of `shard`."""
        out = []
        for entry in self._pending.values():
            for r in entry.ranges:
                pos = r.positions()
                if r.shard == shard and pos is not None and pos[0] < end and start < pos[1]:
                    out.append(entry)
                    break
        return out

    # -- housekeeping ----------------------------------------------------------------------------

    def gc(self, checkpoints: Mapping[int, int], *, record_floor: bool = False) -> int:
        """Delete committed entries entirely below the committed checkpoints (positions per
        shard): the daemon never delivers those ranges again. Returns how many went.

        `record_floor`: before anything goes, raise each shard's floor to its checkpoint
        (`floor()`), so that what went still counts as covered for any writer, in any process;
        call it holding the shards' writer locks.

        Cheap enough to run after every checkpoint commit: it decides from what `refresh`
        already read (each entry file is read once), so its cost is one directory scan plus
        the deletions. Their coverage stays in memory (a redelivery is still recognised).
        A replay's entries stay `REPLAY_KEEP_S` whatever the checkpoints."""
        self.refresh(force=True)
        young = time.time() - REPLAY_KEEP_S
        gone = [
            batch
            for batch, ends in self._ends.items()
            if ends is not None
            and self._replayed.get(batch, 0.0) <= young
            and all(
                shard in checkpoints and end <= checkpoints[shard] for shard, end in ends.items()
            )
        ]
        if gone and record_floor:
            for shard, at in checkpoints.items():
                self._raise_floor(shard, at)
        for batch in gone:
            with contextlib.suppress(FileNotFoundError):
                self._entry_path(batch).unlink()
            with contextlib.suppress(FileNotFoundError):
                self._lock_path(batch).unlink()
            self._loaded.discard(batch)
            del self._ends[batch]
            self._replayed.pop(batch, None)
        if gone:
            fsync_dir(self.dir)
        if time.monotonic() - self._swept_at >= ORPHAN_SWEEP_S:
            self.sweep_orphans()
        return len(gone)

    def sweep_orphans(self, *, tmp_age_s: float = ORPHAN_TMP_AGE_S) -> int:
        """Remove what a writer killed inside `begin` left (file sinks audit: one pair per
        unlucky kill -9, never removed): the temporary file of an entry it was writing, once
        older than `tmp_age_s` (a live `atomic_write` holds one for milliseconds), and a
        `<batch>.lock` as old with no entry beside it that nobody holds (`begin` locks before
        it writes the entry, so a held lock may be one being begun: it stays; and a lock file
        is made per batch, so an old one is never about to be taken). Any project's:
        the directory is shared, and a dead writer's leftovers are nobody's. How many went."""
        self._swept_at = time.monotonic()
        removed = 0
        now = time.time()
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return 0
        for name in names:
            path = self.dir / name
            if name.startswith(".") and name.endswith(".tmp") and ".json." in name:
                with contextlib.suppress(FileNotFoundError):
                    if now - path.stat().st_mtime >= tmp_age_s:
                        path.unlink()
                        removed += 1
            elif name.endswith(".lock") and not (self.dir / f"{name[:-5]}.json").exists():
                with contextlib.suppress(FileNotFoundError):
                    if now - path.stat().st_mtime < tmp_age_s:
                        continue  # `begin` opens it a moment before it locks it: not ours
                fd = lock_exclusive(path)
                if fd is None:
                    continue  # held: being begun, or by a live writer
                try:
                    if not (self.dir / f"{name[:-5]}.json").exists():
                        path.unlink(missing_ok=True)
                        removed += 1
                finally:
                    os.close(fd)
        if removed:
            log.info("wal_orphans_removed", dir=str(self.dir), files=removed)
        return removed


def _release(lease: Lease) -> None:
    """Release, removing the lock file; a lock file that cannot be removed is logged (the
    descriptor, and with it the lock, is gone either way)."""
    try:
        lease.release(remove_lock_file=True)
    except OSError as exc:
        log.warning("wal_lock_file_left", batch=lease.entry.batch, error=repr(exc)[:500])


def _dump(entry: Entry) -> bytes:
    return (json.dumps(entry.to_json()) + "\n").encode()
