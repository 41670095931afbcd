"""Micro-batching across shards, written exactly once.

`add` converts a daemon batch to Arrow (in the calling worker thread, outside every lock) and
buffers it with its `Ack` (from `tracker.defer()`), keyed by (shard, cursor): a batch the daemon
retries is never buffered twice. A flush is due when the buffer reaches `max_rows` or
`max_bytes` (checked in `add`'s caller, `process`, which then writes synchronously and raises if
the write fails, so the daemon retries with its backoff) or when its oldest batch is
`max_delay` old (the timer thread, which retries with its own backoff).

One flush = one Spark write covering every buffered shard:

1. settle: re-read the write-ahead log; drop the log groups committed writes already hold
   (the daemon re-delivers what it had not checkpointed before a crash); a pending entry of a
   crashed writer that overlaps is recovered first, one of a live writer makes us wait;
2. record the write-ahead entry (pending) with the exact ranges;
3. Spark: Arrow → DataFrame → pipeline → sink, partitions (`dt`, `batch`), dynamic overwrite;
4. mark the entry committed;
5. ack every included batch (`ack.done(persist=True)`): only now can checkpoints pass them.

A write that fails is abandoned through the write-ahead log (its entry and any partitions go)
and each daemon batch it held is then written on its own: one bad batch must not block every
shard. A batch whose own write fails in its own `process()` leaves the buffer and the error is
raised, so the daemon's retry and failure policy (`on_failure = "dead_letter"`) applies to
exactly that batch; one whose own write fails elsewhere (another batch's `process()`, the timer)
stays buffered and its shard is asked to re-deliver it (`process` returns a rollback cursor, or,
on a shard waiting for data, the processor's `redelivery()` does), so that it fails in its own
`process()` next. A failed write that cannot be abandoned (a job still
running, a file that cannot be deleted) stays the *pending write* and is retried as it is (same
batch id, same batches, same entry) before anything else is written.

A shard's shutdown and `close()` wait for a running write only within their budget: then its
jobs are cancelled by tag and the write is left pending (abandoned, or recovered by the next
start), never waited for up to `write_timeout`.

Why one module of some 700 lines: the buffer, the pending write, the timer and recovery share
one lock and one write-ahead log, and each step above relies on what the others hold under
that lock; split over modules, those invariants would be spread too. The buffered values
themselves (`Item`, `PendingWrite`) live in `items`.
"""

from __future__ import annotations

import contextvars
import threading
import time
from pathlib import Path

import pyarrow as pa
import structlog
from prometheus_client import CollectorRegistry

from loghubd import Ack, Backoff, Batch, ProcessorContext
from loghubd.arrow import (
    SCHEMA,
    Converted,
    Span,
    convert,
    split_log_groups,
    steps_per_group,
)
from loghubd.wal import COMMITTED, Entry, Lease, Range, Wal, new_batch_id, uncovered
from loghubd_spark import faults, jobs
from loghubd_spark.convert_worker import ConvertPool
from loghubd_spark.items import Item, PendingWrite
from loghubd_spark.metrics import SparkMetrics
from loghubd_spark.options import SparkOptions
from loghubd_spark.runner import SparkError, SparkRunner
from loghubd_spark.source import committed_checkpoints, pull_retained
from loghubd_spark.warmup import synthetic_batch

log = structlog.get_logger("loghubd.spark")

MAX_RETRY_BACKOFF_S = 30.0
# A failed timed write (max_delay, retries of a failed write), and a shard's last write.
TIMER_BACKOFF = Backoff(initial=0.5, cap=MAX_RETRY_BACKOFF_S, jitter=0.5)
SHUTDOWN_BACKOFF = Backoff(initial=0.5, cap=5.0)
# A shutdown waiting for a write another thread runs cancels it this long before its budget
# ends (at most half the budget).
CANCEL_MARGIN_S = 5.0
GC_INTERVAL_S = 300.0  # write-ahead entries below the committed checkpoints are deleted


class WaitForWriter(SparkError):
    """Another live process is writing (or recovering) the same source range: retry later."""


class WriteCancelled(SparkError):
    """A shutdown cancelled the running write (its budget ran out): nothing more is written."""


def _ack(items: list[Item], lock: threading.Lock) -> None:
    with lock:
        acks = [ack for it in items for ack in it.acks]
        for it in items:
            it.acks = []
    for ack in acks:
        ack.done(persist=True)


def _log_skip(batch: Batch, groups: int) -> None:
    log.info(
        "spark_already_written",
        shard=batch.shard,
        cursor=batch.cursor,
        log_groups=groups,
        of=batch.group_count,
    )


class Engine:
    def __init__(
        self,
        options: SparkOptions,
        runner: SparkRunner,
        *,
        context: ProcessorContext | None = None,
        pipeline: jobs.Pipeline | None = None,
    ) -> None:
        self.options = options
        self.runner = runner
        self.context = context
        self.pipeline = pipeline or jobs.Pipeline.from_options(options)
        # The sink as Spark is given it: a local directory made absolute, a URI unchanged.
        self.path = options.path if "://" in options.path else str(Path(options.path).absolute())
        project, logstore = (context.project, context.logstore) if context else ("", "")
        if options.wal_dir is None:  # the log next to the output, on the same local disk
            self.wal = Wal(Path(self.path), project, logstore)
        else:  # the output anywhere Spark writes: its partitions are removed through Spark
            self.wal = Wal(
                Path(options.wal_dir).absolute(),
                project,
                logstore,
                remove_partitions=self._remove_partitions,
            )
        self._lock = threading.Lock()  # the buffer and the acks lists
        self._flush_lock = threading.Lock()  # one flush at a time; guards `_pending`
        self._items: dict[tuple[int, str], Item] = {}
        self._rows = self._bytes = 0
        self._pending: PendingWrite | None = None
        self._failed = False  # `_pending` is a write that failed and awaits its retry
        self._isolated: set[tuple[int, str]] = set()  # batches written alone (see `solo`)
        self._cancelling = False  # a shutdown cancelled the running write: do not split it
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None
        n = options.convert_processes
        self._pool = ConvertPool(n) if n > 0 else None
        self.metrics = (
            context.instruments(SparkMetrics) if context else SparkMetrics(CollectorRegistry())
        )
        self.metrics.buffered.set_function(lambda: float(self._rows))

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self, *, timer: bool = True) -> None:
        """Session up, warm-up, recovery of crashed writes, housekeeping, then the timer."""
        self.runner.start()
        if self._pool is not None:
            self._pool.start()
        warm = convert(0, "", synthetic_batch().raw, per_group=False).table
        started = time.monotonic()
        try:
            self.runner.run(
                lambda spark: jobs.warm_up(spark, warm, self.pipeline),
                tag="loghubd-spark-warm-up",
                timeout=self.options.write_timeout,
            )
        except SparkError as exc:
            cause = exc.__cause__
            if isinstance(cause, jobs.PipelineError):
                raise cause from None
            raise
        log.info(
            "spark_ready",
            master=self.options.master,
            session_s=round(self.runner.started_s, 2),
            warm_up_s=round(time.monotonic() - started, 2),
        )
        self.wal.ensure()
        self.wal.refresh(force=True)
        self.recover_all()
        self.collect_garbage()
        if timer:
            # The timer's writes log with the daemon's context (`source`, which the runner binds
            # as a structlog contextvar): a thread does not inherit contextvars by itself.
            context = contextvars.copy_context()
            self._timer = threading.Thread(
                target=context.run, args=(self._run_timer,), name="loghubd-spark-timer", daemon=True
            )
            self._timer.start()

    def close(self) -> None:
        """Stop the timer, write what is left (bounded), stop Spark. A write that still fails
        keeps its entry pending: the next start recovers it."""
        self._stop.set()
        budget = self.options.shutdown_budget
        deadline = time.monotonic() + budget
        try:
            if self.buffered_rows or self._pending is not None or self.runner.busy:
                self.flush("close", timeout=budget, deadline=deadline)
        except Exception as exc:
            log.error("spark_final_write_failed", error=str(exc)[:1000])
        if self._timer is not None:
            self._timer.join(max(0.0, deadline - time.monotonic()))
        if self._flush_lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            try:
                if self._pending is not None and self._pending.lease is not None:
                    self._pending.lease.release()
                self._pending = None
            finally:
                self._flush_lock.release()
        # Otherwise a cancelled write is still unwinding: its lock goes with the process.
        if self._pool is not None:
            self._pool.close()
        self.runner.stop()

    # -- the buffer ------------------------------------------------------------------------------

    @property
    def buffered_rows(self) -> int:
        return self._rows

    @property
    def buffered_bytes(self) -> int:
        return self._bytes

    def add(self, batch: Batch, ack: Ack) -> None:
        """Buffer `batch` (idempotent per (shard, cursor)); `ack` is completed after the write
        that holds it commits, or at once if earlier writes already hold all of it."""
        key = (batch.shard, batch.cursor)
        if self._merge_retry(key, batch.next_cursor, ack):
            return
        start = steps_per_group(batch.cursor, batch.next_cursor, batch.group_count)
        keep = None
        self.wal.refresh()
        if start is not None:
            spans = self._uncovered(batch.shard, start, batch.group_count)
            if not spans:
                ack.done(persist=False)  # written before a crash, re-delivered: skip it
                _log_skip(batch, batch.group_count)
                return
            if spans != [(0, batch.group_count)]:
                keep = spans
                _log_skip(batch, batch.group_count - sum(b - a for a, b in spans))
        data = self._convert(batch.shard, batch.cursor, batch.raw, keep, start is not None)
        if data.rows == 0:
            ack.done(persist=False)
            return
        item = Item(
            batch.shard, batch.cursor, batch.next_cursor, start, batch.group_count, data, [ack]
        )
        item.solo = key in self._isolated
        with self._lock:
            if key in self._items:  # raced with itself? keep the first, finish both
                self._items[key].acks.append(ack)
                return
            self._items[key] = item
            self._rows += item.rows
            self._bytes += item.nbytes

    def _merge_retry(self, key: tuple[int, str], next_cursor: str, ack: Ack) -> bool:
        with self._lock:
            item = self._items.get(key)
            pending = self._pending
            in_pending = item is None and pending is not None and pending.find(key) is not None
            if in_pending:
                assert pending is not None
                item = pending.find(key)
            if item is None:
                return False
            if item.next_cursor == next_cursor:
                item.acks.append(ack)
                return True
            if in_pending:
                raise WaitForWriter(
                    f"shard {key[0]} batch {key[1]} was fetched again with other bounds while "
                    "a write holding it is being retried"
                )
            # Same start, other end (re-fetched after a rollback): replace it.
            del self._items[key]
            self._rows -= item.rows
            self._bytes -= item.nbytes
            acks = item.acks
        for old in acks:
            old.done(persist=False)  # tokens forgotten by the rollback: ignored by the tracker
        return False

    def _convert(
        self, shard: int, cursor: str, raw: bytes, keep: list[Span] | None, per_group: bool
    ) -> Converted:
        if self._pool is not None:
            return self._pool.convert(shard, cursor, raw, keep, per_group=per_group)
        return convert(shard, cursor, raw, keep, per_group=per_group)

    def due(self, key: tuple[int, str] | None = None) -> bool:
        """A write is due: a threshold is reached, a failed write awaits its retry, or the
        batch `key` (the caller's) is one that is written alone."""
        o = self.options
        with self._lock:
            if key is not None:
                it = self._items.get(key)
                if it is not None and it.solo:
                    return True
            return self._failed or self._rows >= o.max_rows or self._bytes >= o.max_bytes

    def take_rollback(self, shard: int) -> str | None:
        """Where `shard` should be re-read from: the first of its batches whose own write
        failed outside its own `process()` (asked once per failure), else None."""
        with self._lock:
            asked = [
                it
                for it in self._items.values()
                if it.shard == shard and it.suspect and not it.rollback_asked
            ]
            if not asked:
                return None
            first = min(asked, key=lambda it: (it.start is None, it.start or 0, it.added))
            for it in asked:
                it.rollback_asked = True
            log.warning("spark_batch_redelivery_asked", shard=shard, cursor=first.cursor)
            return first.cursor

    def oldest_age(self) -> float | None:
        with self._lock:
            if not self._items:
                return None
            return time.monotonic() - min(it.added for it in self._items.values())

    def _take(
        self, *, solo: bool = False, own: tuple[int, str] | None = None, suspects: bool = False
    ) -> list[Item]:
        """The buffered items that are written together (or, `solo`, those written alone,
        except the ones waiting for their re-delivery unless it is `own` or `suspects`)."""
        with self._lock:
            if solo:
                items = [
                    it
                    for it in self._items.values()
                    if (it.solo or it.suspect) and (not it.suspect or suspects or it.key == own)
                ]
            else:
                items = [it for it in self._items.values() if not (it.solo or it.suspect)]
            for it in items:
                del self._items[it.key]
                self._rows -= it.rows
                self._bytes -= it.nbytes
            return items

    def _restore(self, items: list[Item]) -> None:
        with self._lock:
            for it in items:
                current = self._items.get(it.key)
                if current is not None:
                    current.acks.extend(it.acks)
                    continue
                self._items[it.key] = it
                self._rows += it.rows
                self._bytes += it.nbytes

    # -- writing ---------------------------------------------------------------------------------

    def flush(
        self,
        reason: str,
        *,
        timeout: float | None = None,
        deadline: float | None = None,
        own: tuple[int, str] | None = None,
        suspects: bool = False,
    ) -> None:
        """Write everything buffered (after the pending write, if one failed before); the
        batches written alone each in a write of its own. `own`: the batch of the calling
        `process()`, whose own failure is raised (without it, the first failure is). The
        batches waiting for their re-delivery are tried too only with `suspects` (the timer,
        with its backoff, until their shard has re-delivered them).
        `deadline` (shutdown): a write another thread runs is waited for until shortly
        before it, then cancelled (WriteCancelled)."""
        self._acquire(deadline)
        try:
            self._flush_locked(reason, timeout, own, suspects)
        finally:
            self._flush_lock.release()

    def _acquire(self, deadline: float | None) -> None:
        if deadline is None:
            self._flush_lock.acquire()
            return
        budget = self.options.shutdown_budget
        margin = min(CANCEL_MARGIN_S, budget / 2)
        if self._flush_lock.acquire(timeout=max(0.0, deadline - margin - time.monotonic())):
            return
        # A write is running (the timer, another shard's process()): the budget does not
        # allow waiting for it. Cancel its jobs; it then fails and stays pending.
        self._cancelling = True
        log.warning("spark_write_cancelled_for_shutdown", budget_s=budget)
        self.runner.cancel()
        if not self._flush_lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise WriteCancelled(
                "a cancelled Spark write is still running at the end of the shutdown budget; "
                "its write-ahead entry stays pending and is recovered by the next start"
            )
        self._cancelling = False
        self._flush_lock.release()
        raise WriteCancelled("the running Spark write was cancelled: the shutdown budget ran out")

    def _flush_locked(
        self, reason: str, timeout: float | None, own: tuple[int, str] | None, suspects: bool
    ) -> None:
        if self._pending is not None:
            self._write(self._pending, reason, timeout, own)
        self._write_solo(reason, timeout, own, suspects)
        items = self._take()
        if not items:
            return
        try:
            pending = self._prepare(items)
        except BaseException:
            self._restore(items)
            raise
        if pending is None:
            return
        self._pending = pending
        self._write(pending, reason, timeout, own)

    def _write_solo(
        self,
        reason: str,
        timeout: float | None,
        own: tuple[int, str] | None,
        suspects: bool = False,
    ) -> None:
        """Write each batch that is written alone, in a write of its own. In a `process()`,
        raise only the failure of `own`; elsewhere (timer, shutdown) the first failure. The
        batches that failed wait for their re-delivery (`take_rollback`)."""
        items = self._take(solo=True, own=own, suspects=suspects)
        items.sort(key=lambda it: it.key != own)  # the caller's first
        error: BaseException | None = None
        for i, it in enumerate(items):
            if self._cancelling:
                self._restore(items[i:])
                raise WriteCancelled("the running Spark write was cancelled by a shutdown")
            try:
                pending = self._prepare([it])
            except BaseException:
                self._restore(items[i:])
                raise
            if pending is None:
                self._isolated.discard(it.key)
                continue
            self._pending = pending
            try:
                self._write(pending, reason, timeout, own)
            except WriteCancelled:
                self._restore(items[i + 1 :])
                raise
            except Exception as exc:
                if self._pending is pending:  # could not be abandoned: retried as it is
                    self._restore(items[i + 1 :])
                    raise
                if it.key == own or (own is None and error is None):
                    error = exc
            else:
                self._isolated.discard(it.key)
        if error is not None:
            raise error

    def _prepare(self, items: list[Item]) -> PendingWrite | None:
        self.wal.refresh(force=True)
        self._settle_overlaps(items)
        kept: list[Item] = []
        done: list[Item] = []
        for it in items:
            if it.start is not None:
                spans = self._uncovered(it.shard, it.start, it.group_count)
                if spans != [(0, it.group_count)]:
                    it.data = it.data.keep(spans)
            (kept if it.rows else done).append(it)
        _ack(done, self._lock)
        if not kept:
            return None
        entry = Entry(
            batch=new_batch_id(),
            project=self.wal.project,
            logstore=self.wal.logstore,
            ranges=[r for it in kept for r in it.ranges()],
            sink=self.options.sink,
            rows=sum(it.rows for it in kept),
            arrow_bytes=sum(it.nbytes for it in kept),
            # Dead letters (`loghubd dead-letters replay`): kept past the checkpoint-driven
            # collection, so a replay run again finds this write (loghubd.wal.REPLAY_KEEP_S).
            replay=self.context is not None and self.context.replay,
        )
        return PendingWrite(entry, kept)

    def _uncovered(self, shard: int, start: int, count: int) -> list[Span]:
        """Which of the `count` log groups from `start` no committed write holds yet, nor
        the shard's floor: the collection (`collect_garbage`) records it before deleting
        entries, so a range whose entries went, which this process never read (it was paused
        with the batch buffered, and the shard went to another owner), still counts as
        written. Read after the entries (`refresh`): the floor is raised before they go. Not
        under a replay: the dead letters it writes lie below the floor and were never written
        (the replay's own entries keep it from writing them twice)."""
        replay = self.context is not None and self.context.replay
        covered = self.wal.coverage(shard, below_floor=not replay)
        return uncovered(start, start + count, covered)

    def _settle_overlaps(self, items: list[Item]) -> None:
        """Pending entries of other writers that hold some of our ranges: recover those of
        crashed writers now; wait for live ones."""
        seen: set[str] = set()
        for it in items:
            if it.start is None:
                continue
            for entry in self.wal.overlaps_pending(it.shard, it.start, it.start + it.group_count):
                if entry.batch in seen:
                    continue
                seen.add(entry.batch)
                lease = self.wal.try_lock(entry)
                if lease is None:
                    raise WaitForWriter(
                        f"write-ahead entry {entry.batch} of a live writer holds shard "
                        f"{it.shard} from {it.cursor}: waiting for it to commit"
                    )
                self._recover_locked(lease)
        if seen:
            self.wal.refresh(force=True)

    def _write(
        self, pw: PendingWrite, reason: str, timeout: float | None, own: tuple[int, str] | None
    ) -> None:
        try:
            self._attempt(pw, reason, timeout)
        except Exception as exc:
            if self._cancelling:  # a shutdown cancelled it: it stays pending
                self._cancelling = False
                self._failed = True
                raise WriteCancelled(f"the write was cancelled by a shutdown: {exc}") from exc
            if not self._abandon(pw):
                self._failed = True  # retried as it is: by process(), the timer, or shutdown
                raise
            if len(pw.items) > 1:
                # One bad batch must not block them all: each is written on its own next.
                log.warning(
                    "spark_write_split",
                    batch=pw.entry.batch,
                    daemon_batches=len(pw.items),
                    error=str(exc)[:500],
                )
                for it in pw.items:
                    it.solo = True
                    self._isolated.add(it.key)
                self._restore(pw.items)
                self._write_solo(reason, timeout, own)
                return
            [it] = pw.items
            if it.key == own:
                # Failed in its own process(): raised, so the daemon's policy applies to it;
                # its retry buffers it again (alone), a dead letter leaves it out for good.
                log.warning("spark_batch_write_failed", shard=it.shard, cursor=it.cursor)
                raise
            it.solo, it.suspect, it.rollback_asked = True, True, False
            self._isolated.add(it.key)
            self._restore([it])
            log.warning("spark_batch_awaits_redelivery", shard=it.shard, cursor=it.cursor)
            raise
        except BaseException:
            self._failed = True
            raise
        self._failed = False

    def _abandon(self, pw: PendingWrite) -> bool:
        """Abandon the pending write through the write-ahead log (its partitions, its entry):
        it failed, so its batches can be written otherwise, or a shard of it was let go.
        False if it must stay pending: a job that is still running (a timeout being
        cancelled), or files that could not be deleted."""
        if self.runner.busy:
            return False
        if pw.lease is not None:
            try:
                self.wal.abandon(pw.lease)
            except Exception as exc:
                log.error("spark_abandon_failed", batch=pw.entry.batch, error=repr(exc)[:500])
                return False
        self._pending = None
        self._failed = False
        return True

    def _attempt(self, pw: PendingWrite, reason: str, timeout: float | None) -> None:
        entry = pw.entry
        if pw.lease is None:
            pw.lease = self.wal.begin(entry)
            faults.reached("wal_written")
        table = pw.table()
        started = time.monotonic()
        pw.attempts += 1
        try:
            self._spark_write(table, entry.batch, timeout)
        except Exception as exc:
            self.metrics.failures.inc()
            log.warning(
                "spark_write_failed",
                batch=entry.batch,
                attempt=pw.attempts,
                rows=entry.rows,
                reason=reason,
                error=str(exc)[:2000],
            )
            raise
        faults.reached("sink_written")
        self.wal.commit(pw.lease)
        faults.reached("wal_committed")
        self._pending = None
        _ack(pw.items, self._lock)
        elapsed = time.monotonic() - started
        self.metrics.writes.inc()
        self.metrics.rows.inc(entry.rows)
        self.metrics.seconds.observe(elapsed)
        log.info(
            "spark_batch_written",
            batch=entry.batch,
            reason=reason,
            rows=entry.rows,
            arrow_mib=round(entry.arrow_bytes / 2**20, 2),
            shards=sorted(entry.shards()),
            daemon_batches=len(pw.items),
            seconds=round(elapsed, 3),
        )

    def _spark_write(self, table: pa.Table, batch: str, timeout: float | None) -> None:
        o = self.options
        self.runner.run(
            lambda spark: jobs.write(spark, table, batch, self.pipeline, o.sink, self.path),
            tag=f"loghubd-spark-{batch}",
            timeout=min(o.write_timeout, timeout) if timeout else o.write_timeout,
            arrow_bytes=int(table.nbytes),
        )

    # -- shard shutdown --------------------------------------------------------------------------

    def shutdown_shard(self, shard: int) -> None:
        """Write what is buffered (every shard's: one write), within `shutdown_budget`. What
        of `shard` could not be written is forgotten, so it never reaches the sink after the
        shard may have gone to another consumer (it was never acked: it will be read again)."""
        deadline = time.monotonic() + self.options.shutdown_budget
        failures = 0
        while True:
            remaining = deadline - time.monotonic()
            try:
                self.flush("shutdown", timeout=max(1.0, remaining), deadline=deadline)
                break
            except WriteCancelled as exc:
                log.error("spark_shutdown_write_cancelled", shard=shard, error=str(exc)[:1000])
                break
            except Exception as exc:
                failures += 1
                wait = SHUTDOWN_BACKOFF.wait(failures)
                if remaining < wait + 1.0:
                    log.error("spark_shutdown_write_failed", shard=shard, error=str(exc)[:1000])
                    break
                time.sleep(wait)
        self._forget_shard(shard, deadline)

    def _remove_partitions(self, batch: str) -> None:
        self.runner.run(
            lambda spark: jobs.remove_partitions(spark, self.path, batch),
            tag=f"loghubd-remove-{batch}",
            timeout=self.options.write_timeout,
        )

    def _forget_shard(self, shard: int, deadline: float) -> None:
        if not self._flush_lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            # A write still runs (cancelled): a restart recovers its entry if it stays pending.
            log.error("spark_forget_shard_timed_out", shard=shard)
            with self._lock:
                self._drop_shard_items(shard)
            return
        try:
            self._forget_shard_locked(shard)
        finally:
            self._flush_lock.release()

    def _drop_shard_items(self, shard: int) -> None:
        for key in [k for k in self._items if k[0] == shard]:
            it = self._items.pop(key)
            self._rows -= it.rows
            self._bytes -= it.nbytes
        self._isolated = {k for k in self._isolated if k[0] != shard}

    def _forget_shard_locked(self, shard: int) -> None:
        with self._lock:
            self._drop_shard_items(shard)
        pw = self._pending
        if pw is None or all(it.shard != shard for it in pw.items):
            return
        if self.runner.busy:
            # A cancelled job may still be writing this batch's partitions: deleting them
            # now could race with it. Keep the write pending (a restart recovers it).
            log.error("spark_write_still_running", batch=pw.entry.batch, shard=shard)
            return
        if not self._abandon(pw):
            return  # logged (spark_abandon_failed); a restart recovers the entry
        self._restore([it for it in pw.items if it.shard != shard])
        log.warning("spark_write_abandoned", batch=pw.entry.batch, shard=shard)

    # -- the timer (max_delay, and retries of a failed write) ------------------------------------

    def _run_timer(self) -> None:
        tick = min(0.2, self.options.max_delay / 4)
        retry_at = 0.0
        failures = 0
        gc_at = time.monotonic() + GC_INTERVAL_S
        while not self._stop.wait(tick):
            now = time.monotonic()
            if now >= gc_at:
                gc_at = now + GC_INTERVAL_S
                self.collect_garbage()
            age = self.oldest_age()
            failed = self._failed
            if now < retry_at or not (
                failed or (age is not None and age >= self.options.max_delay)
            ):
                continue
            try:
                self.flush("max_delay" if not failed else "retry", suspects=True)
                failures, retry_at = 0, 0.0
            except Exception as exc:
                failures += 1
                wait = TIMER_BACKOFF.wait(failures)
                retry_at = time.monotonic() + wait
                log.warning(
                    "spark_timer_write_failed", retry_in_s=round(wait, 2), error=str(exc)[:500]
                )

    # -- recovery and housekeeping ---------------------------------------------------------------

    def recover_all(self) -> int:
        """Rewrite every pending entry whose writer is gone, over exactly its ranges."""
        recovered = 0
        for entry in self.wal.pending():
            lease = self.wal.try_lock(entry)
            if lease is None:
                log.info("spark_wal_entry_in_use", batch=entry.batch)
                continue
            try:
                if self._recover_locked(lease):
                    recovered += 1
            except Exception as exc:
                # Left pending: a flush that meets these ranges tries again (or waits).
                log.error("spark_recovery_failed", batch=entry.batch, error=str(exc)[:1000])
                lease.release()
        return recovered

    def _recover_locked(self, lease: Lease) -> bool:
        entry = self.wal.read(lease.entry.batch)
        if entry is None or entry.state == COMMITTED:
            lease.release(remove_lock_file=entry is None)
            return False
        lease.entry = entry
        if self.context is None:
            raise SparkError(
                f"write-ahead entry {entry.batch} needs recovery but the daemon gave no "
                "ProcessorContext (factory.bind): upgrade loghubd"
            )
        started = time.monotonic()
        retained = pull_retained(self.context, entry.ranges)
        tables = []
        for p in retained.pieces:
            count = len(split_log_groups(p.raw))
            start = steps_per_group(p.cursor, p.next_cursor, count)
            tables.append(self._convert(p.shard, p.cursor, p.raw, None, start is not None).table)
        table = pa.concat_tables(tables) if tables else SCHEMA.empty_table()
        if retained.lost:
            self._recover_lost(lease, table, retained.lost)
            return True
        self._spark_write(table, entry.batch, None)
        self.wal.commit(lease)
        log.warning(
            "spark_batch_recovered",
            batch=entry.batch,
            rows=table.num_rows,
            ranges=len(entry.ranges),
            seconds=round(time.monotonic() - started, 3),
        )
        return True

    def _recover_lost(self, lease: Lease, table: pa.Table, lost: list[Range]) -> None:
        """A crashed write whose ranges partly or wholly expired (the daemon was down longer
        than the logstore's TTL): it cannot be rewritten as it was. What the crashed write
        made visible stays, since Spark moves a write's files into place only when its job
        commits (rewriting from what is retained would delete the expired rows it holds);
        when nothing is visible, what is retained is written. Either way the entry is
        committed, once: what expired is lost (the daemon skips it too, `cursor_invalid_
        restarting`), and a pending entry would fail recovery at every start."""
        batch = lease.entry.batch
        visible = self.runner.run(
            lambda spark: jobs.count_partitions(spark, self.path, batch),
            tag=f"loghubd-inspect-{batch}",
            timeout=self.options.write_timeout,
        )
        if not visible and table.num_rows:
            self._spark_write(table, batch, None)
        self.wal.commit(lease)
        log.error(
            "spark_recovery_data_lost",
            batch=batch,
            lost=[f"shard {r.shard}: {r.start} to {r.end}" for r in lost],
            kept="the crashed write's output, as it was" if visible else "the retained logs",
            rows_written=0 if visible else table.num_rows,
            hint="these logs expired (the logstore's TTL) before a restart could rewrite them",
        )

    def collect_garbage(self) -> int:
        """Drop committed entries below the group's committed checkpoints (best effort),
        recording each shard's floor first (`_uncovered`): a former owner still holding a
        batch from there never writes it again. Not by a replay (`loghubd dead-letters
        replay`): it writes below the floor, and leaves the floors to the daemons."""
        if self.context is None:
            return 0
        try:
            removed = self.wal.gc(
                committed_checkpoints(self.context), record_floor=not self.context.replay
            )
        except Exception as exc:
            log.warning("spark_wal_gc_failed", error=repr(exc)[:300])
            return 0
        if removed:
            log.info("spark_wal_gc", removed=removed)
        return removed
