"""The `parquet` processor: Parquet files under a partition template, exactly once.

Each shard buffers its batches as Arrow (`batch.arrow()`, no dict per log) and writes them
when `max_rows` rows or `max_bytes` Arrow bytes are buffered (checked as batches arrive) or
when the oldest buffered batch is `max_age_s` old (the factory's timer thread). A write
splits the rows by the partition template (loghubd/processors/parquet_layout.py) and makes one
file per partition visible by an atomic rename recorded in the write-ahead log first
(loghubd/processors/parquet_files.py, loghubd/wal.py); only then are the batches acknowledged
(`tracker.defer()`), so the checkpoint never passes rows that are not in visible files, and a
range committed once is never written again, whoever re-delivers it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from loghubd.arrow import position
from loghubd.config.redact import described
from loghubd.errors import describe_error
from loghubd.models import Batch
from loghubd.plugins.api import Ack, ProcessorContext, Tracker
from loghubd.processors import parquet_files as files
from loghubd.processors import parquet_layout as layout
from loghubd.processors.file_errors import doing
from loghubd.processors.options import check_options
from loghubd.processors.ticker import Ticker
from loghubd.wal import COMMITTED, Entry, Range, Wal, new_batch_id

log = structlog.get_logger("loghubd.parquet")

COMPRESSIONS = ("zstd", "snappy", "gzip", "lz4", "brotli", "none")
# `statistics = "time"` (the default): min/max of these columns only. Min/max of the string
# columns of unsorted logs seldom lets a reader skip a row group (every row group holds every
# level, ids from all over the range), and computing them is ~a quarter of the write's CPU
# (docs/parquet.md, "Statistics").
TIME_STATISTICS = ("__time__", "__time_ns__", "__shard__")
# A column's dictionary stops growing at this size and the rest of its column chunk is written
# plain. pyarrow's own limit (1 MiB) lets a column of unique values (ids, request ids, paths,
# latencies) hash some 30,000-100,000 values per file before giving up; 64 KiB still holds the
# dictionary of any column with a few thousand distinct values (levels, methods, hosts), and on
# unique values the write costs 14-29 % less CPU, with files no larger (docs/parquet.md).
DICTIONARY_PAGE_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class ParquetOptions:
    path: str
    wal_dir: str | None
    template: layout.Template
    fields: tuple[str, ...] | None
    compression: str
    compression_level: int | None
    statistics: bool | tuple[str, ...]  # pq.write_table's write_statistics
    dictionary_page_bytes: int  # pq.write_table's dictionary_pagesize_limit
    max_rows: int
    max_bytes: int
    max_age_s: float
    max_buffered_bytes: int  # all shards' buffers together, in this process


def parse(options: Mapping[str, Any]) -> ParquetOptions:
    check_options(
        "parquet",
        options,
        {
            "path": str,
            "wal_dir": str,
            "partition": str,
            "fields": list,
            "compression": str,
            "compression_level": int,
            "statistics": (str, list),
            "dictionary_page_bytes": int,
            "max_rows": int,
            "max_bytes": int,
            "max_age_s": (int, float),
            "max_buffered_bytes": int,
        },
    )
    if not options.get("path"):
        raise ValueError("processor.parquet.path: required (a directory or a file system URI)")
    try:
        template = layout.parse_template(str(options.get("partition", layout.DEFAULT_TEMPLATE)))
    except ValueError as exc:
        raise ValueError(f"processor.parquet.partition: {exc}") from None
    for name, close in layout.likely_typos(template):
        # Legal (any other name is a log field), but a misspelt {date} sent every row to
        # __HIVE_DEFAULT_PARTITION__ without a word (file sinks audit).
        log.warning(
            "parquet_partition_placeholder_is_a_field",
            key="processor.parquet.partition",
            placeholder=name,
            did_you_mean=close,
            hint="a placeholder that is not built in reads the log field of that name; logs "
            "without it go to __HIVE_DEFAULT_PARTITION__",
        )
    fields = options.get("fields")
    if fields is not None and not all(isinstance(f, str) and f for f in fields):
        raise ValueError(
            f"processor.parquet.fields: a list of field names, got {described('fields', fields)}"
        )
    compression = str(options.get("compression", "zstd")).lower()
    if compression not in COMPRESSIONS:
        raise ValueError(
            f"processor.parquet.compression: {compression!r} is not one of "
            + ", ".join(COMPRESSIONS)
        )
    level = options.get("compression_level")
    if level is not None:
        check_compression_level(compression, level)
    statistics = parse_statistics(options.get("statistics", "time"))
    dictionary = int(options.get("dictionary_page_bytes", DICTIONARY_PAGE_BYTES))
    if dictionary < 1024:
        raise ValueError(
            f"processor.parquet.dictionary_page_bytes: must be >= 1024, got {dictionary}"
        )
    sizes = {
        "max_rows": int(options.get("max_rows", 1_000_000)),
        "max_bytes": int(options.get("max_bytes", 256 * 1024 * 1024)),
        "max_buffered_bytes": int(options.get("max_buffered_bytes", 512 * 1024 * 1024)),
    }
    for key, value in sizes.items():
        if value < 1:
            raise ValueError(f"processor.parquet.{key}: must be >= 1, got {value}")
    age = float(options.get("max_age_s", 60.0))
    if age <= 0:
        raise ValueError(f"processor.parquet.max_age_s: must be > 0, got {age:g}")
    return ParquetOptions(
        path=str(options["path"]),
        wal_dir=options.get("wal_dir"),
        template=template,
        fields=tuple(fields) if fields is not None else None,
        compression=compression,
        compression_level=level,
        statistics=statistics,
        dictionary_page_bytes=dictionary,
        max_rows=sizes["max_rows"],
        max_bytes=sizes["max_bytes"],
        max_age_s=age,
        max_buffered_bytes=sizes["max_buffered_bytes"],
    )


def check_compression_level(compression: str, level: int) -> None:
    """ValueError naming the key unless `compression` takes `level`: checked at start by
    encoding a one-row table in memory as every write will (else every write of every shard
    fails, or Arrow silently clamps a level out of the codec's range)."""
    key = "processor.parquet.compression_level"
    try:
        pq.write_table(
            pa.table({"x": [1]}),
            pa.BufferOutputStream(),
            compression=compression,
            compression_level=level,
        )
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise ValueError(f"{key}: {compression} does not take level {level} ({exc})") from None
    low, high = (
        pa.Codec.minimum_compression_level(compression),
        pa.Codec.maximum_compression_level(compression),
    )
    if not low <= level <= high:
        raise ValueError(f"{key}: {compression} takes a level from {low} to {high}, got {level}")


def parse_statistics(value: str | Sequence[Any]) -> bool | tuple[str, ...]:
    """`statistics`: "time", "all", "none" or a list of column names."""
    if value == "all":
        return True
    if value == "none":
        return False
    if value == "time":
        return TIME_STATISTICS
    if isinstance(value, list | tuple) and all(isinstance(c, str) and c for c in value):
        return tuple(value)
    raise ValueError(
        'processor.parquet.statistics: "time", "all", "none" or a list of column names,'
        f" got {value!r}"
    )


WRITE_REASONS = ("max_rows", "max_bytes", "max_age", "max_buffered_bytes", "shutdown")
_WRITE_SECONDS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class ParquetMetrics:
    """The processor's own series on the source's registry (docs/metrics.md): what it wrote,
    how long a write took, what failed (a write the timer or another shard started fails
    in a log line only, so it is counted here), and what it holds buffered."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.rows = Counter(
            "loghubd_parquet_written_rows_total", "Rows in Parquet files made visible", registry=r
        )
        self.files = Counter(
            "loghubd_parquet_written_files_total", "Parquet files made visible", registry=r
        )
        self.seconds = Histogram(
            "loghubd_parquet_write_duration_seconds",
            "One shard's write: encode, fsync, write-ahead entry, renames",
            buckets=_WRITE_SECONDS,
            registry=r,
        )
        self.failures = Counter(
            "loghubd_parquet_write_failures_total",
            "Writes that failed, by what started them (the rows stay buffered or re-delivered)",
            ["reason"],
            registry=r,
        )
        for reason in WRITE_REASONS:  # at 0 from the start: increase() sees the first one
            self.failures.labels(reason)
        self.buffered = Gauge(  # its function is set by the factory bound last
            "loghubd_parquet_buffered_bytes",
            "Arrow bytes buffered by all shards, not yet written (max_buffered_bytes bounds it)",
            registry=r,
        )


@dataclass(slots=True)
class Buffered:
    cursor: str
    next_cursor: str
    rows: pa.RecordBatch
    ack: Ack
    since: float = field(default_factory=time.monotonic)


class ParquetProcessor:
    def __init__(self, factory: ParquetFactory, shard: int) -> None:
        self.factory = factory
        self.shard = shard
        ctx = factory.context
        assert ctx is not None, "bind() first"
        self.project, self.logstore = ctx.project, ctx.logstore
        self._replay = ctx.replay  # `loghubd dead-letters replay`: writing dead letters
        self.wal = Wal(
            factory.target.wal_root,
            ctx.project,
            ctx.logstore,
            remove_partitions=lambda batch: files.remove_temporaries(
                factory.target, self.wal.read(batch)
            ),
        )
        self.buffer: dict[str, Buffered] = {}  # by start cursor: a retried batch is kept once
        self.buffered_rows = self.buffered_bytes = 0  # of `buffer`, kept as batches come
        self.lock = threading.Lock()
        self._granted = False
        self._unfinished: list[Entry] = []  # committed writes whose renames failed
        # Writes whose commit raised: committed on disk or not (`_settle` reads which).
        self._unsettled: list[Entry] = []
        self.failed_at = 0.0  # when the last timer-driven write failed (it waits a little)

    def initialize(self, shard: int) -> None:
        with (
            doing("recover the unfinished writes under", self.factory.target.root),
            files.shard_lock(self.wal, self.logstore, shard),
        ):
            finished, discarded = files.recover(self.factory.target, self.wal, shard)
        if finished or discarded:
            self.factory.log.warning(
                "parquet_recovered", shard=shard, renamed=finished, discarded=discarded
            )
        self.factory.register(self)

    def process(self, batch: Batch, tracker: Tracker) -> None:
        if not self._granted:  # the first batch starts where the shard was granted
            self._granted = True
            # Not under a replay: a dead letter's cursor says nothing of the group's
            # checkpoint, and the live daemon's entries ahead of that checkpoint are what
            # keeps its next re-read from writing their ranges twice.
            if not self._replay:
                with (
                    doing("collect the write-ahead entries in", self.wal.dir),
                    files.shard_lock(self.wal, self.logstore, self.shard),
                ):
                    files.collect_garbage(self.wal, self.shard, batch.cursor)
        rows = batch.arrow(self.factory.options.fields)
        with self.lock:
            added = batch.cursor not in self.buffer
            if added:
                self.buffer[batch.cursor] = Buffered(
                    batch.cursor, batch.next_cursor, rows, tracker.defer()
                )
                self.buffered_rows += rows.num_rows
                self.buffered_bytes += rows.nbytes
                self.factory.buffered(rows.nbytes)
            o = self.factory.options
            try:
                if self.buffered_rows >= o.max_rows:
                    self._write("max_rows")
                elif self.buffered_bytes >= o.max_bytes:
                    self._write("max_bytes")
            except BaseException:
                if added:
                    self._unbuffer(batch.cursor)
                raise
        # Outside this shard's lock: the largest buffer may be another shard's.
        try:
            self.factory.write_largest_if_over(self)
        except BaseException:  # this shard's own write failed (another's is only logged)
            if added:
                with self.lock:
                    self._unbuffer(batch.cursor)
            raise

    def _unbuffer(self, cursor: str) -> None:
        """Take a batch whose `process` fails back out of the buffer (holding `lock`): the
        daemon retries it (buffering it again) or gives up on it (dead-letters it, and the
        checkpoint passes it), so it must not stay to be written by a later write, or it
        would be in the sink twice after a replay. The batches buffered before it stay (their
        `process` returned: they are deferred, the daemon waits for their acks)."""
        item = self.buffer.pop(cursor, None)
        if item is None:
            return  # written after all (by another shard's write, say)
        self.buffered_rows -= item.rows.num_rows
        self.buffered_bytes -= item.rows.nbytes
        self.factory.buffered(-item.rows.nbytes)

    def age(self) -> float:
        with self.lock:
            oldest = min((b.since for b in self.buffer.values()), default=None)
        return 0.0 if oldest is None else time.monotonic() - oldest

    def write(self, reason: str) -> None:
        with self.lock:
            self._write(reason)

    def flush(self) -> None:
        """Called before a checkpoint commit: nothing to do, rows are durable once acked."""

    def committed(self, cursor: str) -> None:
        """After a checkpoint commit: this shard's write-ahead entries wholly behind it are
        deleted (the daemon never delivers those ranges again). Without it the log would grow
        by one entry per file for as long as the shard stays held. A directory scan and a few
        deletions: it is skipped, not waited for, while this shard is writing."""
        at = position(cursor)
        if at is None:
            return
        # Never waits for a write in progress (this shard's next commit waits for this call):
        # a busy shard collects at a later commit, with a later cursor. The shard's lock across
        # processes too: the floor this records is read under it (`_uncovered`).
        if not self.lock.acquire(blocking=False):
            return
        try:
            if self._unfinished or self._unsettled:
                # A committed write whose renames are not done yet (its batch may have been
                # dead-lettered, so the checkpoint passed it): its entry is what finishes them
                # after a crash, and what tells a replay the rows are there. Kept until then.
                return
            with files.shard_lock(self.wal, self.logstore, self.shard, timeout=0):
                removed = self.wal.gc({self.shard: at}, record_floor=True)
        except TimeoutError:
            return  # another process is writing this shard (it lost it): a later commit
        finally:
            self.lock.release()
        if removed:
            self.factory.log.debug("parquet_wal_collected", shard=self.shard, removed=removed)

    def shutdown(self, tracker: Tracker) -> None:
        self.factory.unregister(self)
        try:
            self.write("shutdown")
        except Exception as exc:
            # Not acknowledged: the checkpoint stays before these batches; a next owner reads
            # them again. Raised on, so that a daemon stopping says so in its exit code.
            self.factory.log.error(
                "parquet_write_failed",
                shard=self.shard,
                reason="shutdown",
                error=describe_error(exc),
            )
            raise
        finally:
            with self.lock:  # whatever was not written is dropped: no longer held here
                self.factory.buffered(-self.buffered_bytes)
                self.buffer.clear()
                self.buffered_rows = self.buffered_bytes = 0

    def _write(self, reason: str) -> None:
        if not self.buffer and not self._unfinished and not self._unsettled:
            return  # (a committed write's renames are finished even with nothing buffered)
        items = list(self.buffer.values())
        started = time.perf_counter()
        metrics = self.factory.metrics
        try:
            # The steps below say which file failed; this names the output for the rest
            # (the shard's lock, reading the write-ahead log).
            with (
                doing("write Parquet files under", self.factory.target.root),
                files.shard_lock(self.wal, self.logstore, self.shard),
            ):
                self._settle()
                self._finish_renames()
                self.wal.refresh(force=True)
                table = self._uncovered(items)
                written, count = self._commit(table, items) if table.num_rows else (0, 0)
        except BaseException:
            metrics.failures.labels(reason).inc()
            raise
        seconds = time.perf_counter() - started
        metrics.rows.inc(written)
        metrics.files.inc(count)
        metrics.seconds.observe(seconds)
        for item in items:
            item.ack.done()
        self.buffer.clear()
        self.factory.buffered(-self.buffered_bytes)
        self.buffered_rows = self.buffered_bytes = 0
        self.factory.log.info(
            "parquet_written",
            shard=self.shard,
            reason=reason,
            rows=written,
            batches=len(items),
            seconds=round(seconds, 3),
        )

    def _uncovered(self, items: list[Buffered]) -> pa.Table:
        """The buffered rows minus the log groups committed writes already hold, and minus
        everything below the shard's floor (what collected entries held: a daemon that lost
        the shard while paused must not write it again). Not under a replay: the dead letters
        it writes lie below the floor and were never written (a dead-lettered batch leaves
        the buffer, `process`); the replay's own entries keep it from writing them twice."""
        covered = self.wal.coverage(self.shard, below_floor=not self._replay)
        parts: list[pa.RecordBatch] = []
        for item in items:
            rows = item.rows
            a, b = position(item.cursor), position(item.next_cursor)
            if covered and a is not None and b is not None:
                if any(lo <= a and b <= hi for lo, hi in covered):
                    continue  # wholly written already
                if any(lo < b and a < hi for lo, hi in covered):
                    rows = _drop_covered(rows, covered)
            parts.append(rows)
        if not parts:
            return pa.table({})
        schema = parts[0].schema
        if all(p.schema.equals(schema) for p in parts):  # the usual case: no copy, no promotion
            return pa.Table.from_batches(parts, schema=schema)
        tables = [pa.Table.from_batches([p]) for p in parts]
        return pa.concat_tables(tables, promote_options="default")

    def _commit(self, table: pa.Table, items: list[Buffered]) -> tuple[int, int]:
        """Rows and files written."""
        o, target = self.factory.options, self.factory.target
        groups = layout.partitions(
            o.template, table, project=self.project, logstore=self.logstore, shard=self.shard
        )
        batch_id = new_batch_id()
        plan = []
        hidden = layout.shadowed(o.template)
        for i, (directory, rows) in enumerate(groups):
            rows = layout.unshadow(rows, hidden)
            base = f"{target.root}/{directory}".rstrip("/")
            name = f"part-{self.shard}-{batch_id}-{i}.parquet"
            plan.append((f"{base}/.{name}.tmp", f"{base}/{name}", rows))
        entry = Entry(
            batch=batch_id,
            project=self.project,
            logstore=self.logstore,
            ranges=[Range(self.shard, it.cursor, it.next_cursor) for it in items],
            sink="parquet",
            rows=table.num_rows,
            arrow_bytes=table.nbytes,
            renames=[(tmp, final) for tmp, final, _ in plan],
            # Dead letters (behind the checkpoint): the entry must outlive the daemon's
            # checkpoint-driven collection, or a replay run again would write them twice.
            replay=self._replay,
        )
        with doing(f"record the write-ahead entry {batch_id} in", self.wal.dir):
            lease = self.wal.begin(entry)
        try:
            for tmp, _final, rows in plan:
                with doing("write", tmp):
                    files.write_file(target, tmp, rows, o)
            _sync_dirs(target, [tmp for tmp, _, _ in plan])
        except BaseException:
            self.wal.abandon_quietly(lease)  # the write's own error is the one raised
            raise
        try:
            # The renames are recorded: from here on they will happen.
            with doing(f"commit the write-ahead entry {batch_id} in", self.wal.dir):
                self.wal.commit(lease)
        except BaseException:
            # Maybe committed: the entry may have reached the disk before the failure (a
            # directory fsync after the rename, say). Its temporaries must then be renamed
            # (the retry finds the range covered), else discarded with the entry.
            lease.release()
            self._unsettled.append(entry)
            try:
                self._settle()
            except Exception as exc:  # the next write settles it; the commit's error is raised
                self.factory.log.warning(
                    "parquet_settle_failed",
                    shard=self.shard,
                    batch=entry.batch,
                    error=describe_error(exc),
                )
            raise
        self._unfinished.append(entry)
        self._finish_renames()
        return int(table.num_rows), len(plan)

    def _settle(self) -> None:
        """Finish or discard the writes whose commit raised, by the state of their entry on
        disk: committed, its renames are to be finished (`_unfinished`); pending, its entry and
        temporary files are removed (the rows are still buffered and written again)."""
        while self._unsettled:
            entry = self._unsettled[0]
            on_disk = self.wal.read(entry.batch)
            if on_disk is not None and on_disk.state == COMMITTED:
                self._unfinished.append(entry)
                self.factory.log.warning(
                    "parquet_commit_reached_disk", shard=self.shard, batch=entry.batch
                )
            elif on_disk is not None:
                lease = self.wal.try_lock(entry)
                if lease is not None:  # else another process is discarding it
                    self.wal.abandon_quietly(lease)  # else left for recovery
            self._unsettled.pop(0)

    def _finish_renames(self) -> None:
        target = self.factory.target
        while self._unfinished:
            entry = self._unfinished[0]
            for tmp, final in entry.renames:
                with doing("rename", tmp, to=final):
                    files.rename(target, tmp, final)
            _sync_dirs(target, [final for _, final in entry.renames])
            self._unfinished.pop(0)


def _sync_dirs(target: files.Target, paths: list[str]) -> None:
    """`files.sync_dirs`, a directory at a time: a failure names its directory (an fsync
    fails with an OSError that names no file)."""
    one_each = {path.rsplit("/", 1)[0]: path for path in paths}
    for directory, path in sorted(one_each.items()):
        with doing("sync directory", directory):
            files.sync_dirs(target, [path])


def _drop_covered(rows: pa.RecordBatch, covered: list[tuple[int, int]]) -> pa.RecordBatch:
    """Rows whose log group (`__cursor__`) is not inside a covered interval."""
    cursors = pc.unique(rows.column("__cursor__")).to_pylist()
    gone = []
    for cursor in cursors:
        at = position(cursor) if cursor else None
        if at is not None and any(lo <= at < hi for lo, hi in covered):
            gone.append(cursor)
    if not gone:
        return rows
    keep = pc.invert(pc.is_in(rows.column("__cursor__"), value_set=pa.array(gone)))
    return rows.filter(keep)


class ParquetFactory:
    """Per daemon: the options, the output, the timer thread that writes buffers that
    reached `max_age_s`, and the bytes all shards hold buffered: past `max_buffered_bytes`
    the largest buffer is written. Buffered batches are deferred (acknowledged when written),
    and the daemon's `max_bytes_in_flight` counts a batch only until `process` returns, so
    this is what bounds the processor's memory whatever the number of shards."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.options = parse(options)
        self.target = files.open_target(self.options.path, self.options.wal_dir)
        self.context: ProcessorContext | None = None
        self._processors: set[ParquetProcessor] = set()
        self._lock = threading.Lock()
        self._timer = Ticker("parquet-timer", min(0.5, self.options.max_age_s / 4), self._tick)
        self._buffered = 0  # Arrow bytes in every processor's buffer
        self.metrics = ParquetMetrics(CollectorRegistry())  # bind() puts them on the daemon's
        # Its lines name the group and consumer, as the shard tasks' do (bind() knows them).
        self.log: Any = log

    def buffered(self, delta: int) -> None:
        with self._lock:
            self._buffered += delta

    @property
    def buffered_bytes(self) -> int:
        with self._lock:
            return self._buffered

    def write_largest_if_over(self, caller: ParquetProcessor) -> None:
        """Past `max_buffered_bytes`, write the largest buffer (a processor's `write` takes its
        own lock). When it is another shard's and its write fails, that is its failure, not
        the calling batch's: logged, and that buffer stays (its timer retries it)."""
        with self._lock:
            if self._buffered < self.options.max_buffered_bytes or not self._processors:
                return
            largest = max(self._processors, key=lambda p: p.buffered_bytes)
        if largest is caller:
            largest.write("max_buffered_bytes")
        else:
            self._write_aside(largest, "max_buffered_bytes")

    def _write_aside(self, processor: ParquetProcessor, reason: str) -> None:
        """Write a buffer for the timer or for another shard's batch: a failure is that
        buffer's, logged, and it stays buffered (the timer retries it a moment later)."""
        try:
            processor.write(reason)
        except Exception as exc:
            processor.failed_at = time.monotonic()
            self.log.warning(
                "parquet_write_failed",
                shard=processor.shard,
                reason=reason,
                error=describe_error(exc),
            )

    def bind(self, context: ProcessorContext) -> None:
        self.context = context
        self.log = log.bind(group=context.group, consumer=context.consumer)
        self.metrics = context.instruments(ParquetMetrics)
        self.metrics.buffered.set_function(lambda: float(self.buffered_bytes))

    def start(self) -> None:
        self._timer.start()

    def close(self) -> None:
        self._timer.stop()

    def register(self, processor: ParquetProcessor) -> None:
        with self._lock:
            self._processors.add(processor)

    def unregister(self, processor: ParquetProcessor) -> None:
        with self._lock:
            self._processors.discard(processor)

    def __call__(self, shard: int) -> ParquetProcessor:
        return ParquetProcessor(self, shard)

    def _tick(self) -> None:
        """Write the buffers that reached `max_age_s` (the timer's, every 0.5 s at most)."""
        with self._lock:
            processors = list(self._processors)
        for p in processors:
            if p.age() < self.options.max_age_s:
                continue
            if time.monotonic() - p.failed_at < min(5.0, self.options.max_age_s):
                continue  # a write just failed: give the file system a moment
            self._write_aside(p, "max_age")
