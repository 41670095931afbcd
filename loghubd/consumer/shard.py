"""One held shard: start position, processor lifecycle, the consume loop, fenced commits.

Lifecycle: find the start (the server's checkpoint wins; otherwise the configured start
position) → `processor.initialize` → consume batches in order while the fetcher prefetches
the next → on stop: finish the batch in hand (a failing one is not retried: it is left
unfinished, `tracker.stopping`), commit (fenced), `processor.shutdown`, commit what shutdown
saved. A prefetched batch that was not processed is simply dropped: the
committed position never covers it, so the next owner reads it (no loss, no duplicate).

Commits are fenced (`forceSuccess=false`). An ownership error means another consumer owns
the shard now: the shard stops at once and commits nothing more (its work since the last
commit will be redone by the new owner: duplicates only, never loss).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import anyio
import structlog

from loghubd.consumer import group_size, window
from loghubd.consumer.budget import ByteBudget
from loghubd.consumer.fetcher import (
    LAG_PROBE_INTERVAL_S,
    CaughtUp,
    CursorReset,
    EndOfShard,
    EndOfWindow,
    FetchSettings,
    FetchStatus,
    Item,
    ShardCatalog,
    Skipped,
    probe_lag,
    run_fetcher,
)
from loghubd.consumer.processing import (
    DeadLettered,
    Interrupted,
    Processed,
    RetryPolicy,
    ShardStopped,
    process_with_retry,
    start_with_retry,
    stopped_within,
)
from loghubd.consumer.snapshot import ErrorNote, ShardSnapshot, shown_state
from loghubd.consumer.tracking import ShardTracker, StopFlag
from loghubd.consumer.twins import OurCommits
from loghubd.errors import describe_error
from loghubd.faults import Episode
from loghubd.logging import traceback_of
from loghubd.models import Batch
from loghubd.ops.metrics import Metrics
from loghubd.plugins.loaded import LoadedFactory, LoadedProcessor
from loghubd.protocol import errors as E
from loghubd.sls import SlsClient

log = structlog.get_logger("loghubd.shard")

# A failed commit request may still reach the server late: the audit leaves the shard's
# checkpoint unjudged this long after one.
COMMIT_FAILURE_QUIET_S = 60.0
_holdings = itertools.count(1)  # tells one holding of a shard from the next


@dataclass(frozen=True, slots=True, kw_only=True)
class ShardContext:
    """Everything a shard task needs, shared by all shards of one consumer."""

    client: SlsClient
    settings: FetchSettings
    group: str
    consumer: str
    start: str  # "begin", "end" or unix seconds, for shards without a checkpoint
    factory: LoadedFactory
    retry: RetryPolicy
    metrics: Metrics
    budget: ByteBudget
    catalog: ShardCatalog
    # False once our last successful heartbeat is older than the group timeout: the server
    # may have given our shards away, so no batch is processed until the heartbeat decides.
    lease_valid: Callable[[], bool]
    # A bounded run (`consumer.end`, unix seconds): read up to the cursor of that time.
    end: float | None = None
    # Called when a shard reached the end of its window (or of its data) and committed it.
    on_finished: Callable[[], None] = lambda: None
    # How often every held shard commits its lowest unfinished position (`Supervisor`).
    checkpoint_interval: float = 5.0


LEASE_POLL_S = 0.05  # how often a shard holding a batch looks whether the lease is back
# A shard handed over on a rebalance whose final commit keeps failing (while our lease holds):
# how long it is kept, unconsumed, before the next owner gets it from the older checkpoint.
HANDOVER_PATIENCE_S = 60.0
# A shard abandoned at the end of the shutdown grace: how long its processor's flush and
# shutdown may take (they may wait on the very call that is stuck).
ABANDONED_CALL_S = 1.0
# While a shard waits for data, how often a processor with `redelivery()` is asked.
REDELIVERY_POLL_S = 1.0


@dataclass(frozen=True, slots=True)
class Redeliver:
    """The processor's `redelivery()` asked, while the shard waited, to re-read from `cursor`."""

    cursor: str


@dataclass
class ShardStatus:
    """What the shard task keeps about itself for the snapshot and the periodic commit."""

    shard: int
    fetch: FetchStatus = field(default_factory=FetchStatus)
    state: str = "starting"  # starting | consuming | finished | stopping | failed
    reason: str = ""
    processor_error: str = ""  # why the batch being retried failed last ("" when none is)
    # When a batch was last finished, or came after a pull found nothing more (an idle
    # spell): readiness's "no progress for Ns" counts from here, not from before the spell
    # (postgres audit: "no progress for 573s" for data written 14 s before).
    last_progress: float = field(default_factory=time.monotonic)
    # When the committed position last moved, or was last seen holding nothing back (all that
    # was fetched is committed): `checkpoint_age` counts from here while data waits behind it.
    last_commit: float = field(default_factory=time.monotonic)
    # Since the shard was taken: finished batches, their logs and bytes.
    batches: int = 0
    logs: int = 0
    bytes: int = 0
    last_error: ErrorNote | None = None  # a failed pull, batch or commit

    def note_error(self, message: str) -> None:
        self.last_error = ErrorNote(message=message[:300], at=time.time())

    @property
    def caught_up(self) -> bool:
        """Read up to the end of the shard, and nothing is failing in between."""
        return self.fetch.caught_up and not self.processor_error


class ShardTask:
    def __init__(self, shard: int, ctx: ShardContext) -> None:
        self.shard = shard
        self.ctx = ctx
        self.status = ShardStatus(shard)
        self.stop_requested = StopFlag()  # also the processor's `tracker.stopping`
        self.tracker: ShardTracker | None = None
        self.processor: LoadedProcessor | None = None
        self.lost = False  # another consumer owns the shard: never commit again
        self.commit_failed = False  # the last commit attempt failed for another reason
        self.shutdown_failed = False  # `processor.shutdown` raised: its last work may be undone
        # Still busy when the shutdown grace ended: processor calls are bounded from now on.
        self.abandoned = False
        # Set when retrying a failing final commit is pointless or too late: the daemon is
        # shutting down (`Supervisor.stop_all`: its grace bounds the stop), or the server
        # gave the shard away (`drop`).
        self.no_more_retries = StopFlag()
        self._ended = False  # `_finish` is over: a periodic commit still queued sends nothing
        self._commit_lock = anyio.Lock()
        self._shutting_down = False  # `processor.shutdown` was called: no more hooks
        # What the checkpoint audit (`twins`) knows of our own commits of the shard.
        self._holding = next(_holdings)
        self._commit_attempts = 0
        self._last_sent: str | None = None
        self._started_from = ""
        self._last_commit_failure = -COMMIT_FAILURE_QUIET_S
        self._in_hand_since: float | None = None  # monotonic: a batch is in the processor
        self._held_since: float | None = None  # monotonic: a batch waits for the lease
        self._commits_failing = Episode()  # `checkpoint_commit_recovered` when one gets through
        self._commit_scope: anyio.CancelScope | None = None  # the commit request in flight
        self._starting: LoadedProcessor | None = None  # made; its `initialize` not through
        self._waiting: anyio.CancelScope | None = None
        self._bind = {"group": ctx.group, "consumer": ctx.consumer, "shard": shard}

    # -- commits -----------------------------------------------------------------------------

    async def commit(self, *, resend: bool = False) -> bool:
        """Commit the lowest unfinished position if it moved (or even if not, with `resend`).
        False if it could not be."""
        async with self._commit_lock:
            ok, moved_to = await self._commit(resend)
        if moved_to is not None:
            await self._tell_committed(moved_to)
        return ok

    async def _commit(self, resend: bool) -> tuple[bool, str | None]:
        """`commit` under its lock: whether it succeeded, and the cursor committed now (None
        when nothing moved)."""
        tracker = self.tracker
        if tracker is None or self.lost or self._ended:
            return not self.lost, None
        cursor = tracker.committable()
        if not tracker.needs_commit() and not resend:
            if tracker.committed == tracker.fetch_cursor:  # nothing waits behind it
                self.status.last_commit = time.monotonic()
            return True, None
        # Not after `processor.shutdown` (a finished window's shard recommitting its end
        # over a forced reset): its output is durable by then, and it takes no more calls.
        flush = None if self.processor is None or self._shutting_down else self.processor.flush
        try:
            if flush is not None and self.processor is not None:
                # Make the processor's output durable first. An abandoned shard's
                # processor may be stuck: its flush is not waited for for ever.
                if self.abandoned and self.processor.flush_abandoning is not None:
                    with anyio.fail_after(ABANDONED_CALL_S):
                        await self.processor.flush_abandoning()
                else:
                    await flush()
            self._commit_attempts += 1
            self._last_sent = cursor
            # `drop` cancels it: the client's own retries of a commit in flight must not reach
            # the server after the daemon rejoined, when the shard may be ours again and
            # another consumer's later checkpoint stands (a stale cursor would move it back).
            with anyio.CancelScope() as scope:
                self._commit_scope = scope
                try:
                    if not self.lost:
                        await self.ctx.client.commit(
                            self.ctx.settings.logstore,
                            self.ctx.group,
                            self.ctx.consumer,
                            self.shard,
                            cursor,
                        )
                finally:
                    self._commit_scope = None
            if scope.cancelled_caught or self.lost:  # dropped meanwhile: nothing was saved
                return False, None
        except E.OwnershipLost as exc:
            self.lost = True
            self.request_stop()
            if resend and tracker.committed == cursor:
                # The end of a read-only shard, already saved by us: the server ended the
                # shard on that commit (or gave it on, at its end), and refuses a second one.
                log.info("shard_end_already_saved", **self._bind, cursor=cursor)
                return True, None
            self.ctx.metrics.ownership_lost.labels(str(self.shard)).inc()
            self.ctx.metrics.commits.labels("ownership_lost").inc()
            log.warning("shard_ownership_lost", **self._bind, error=str(exc))
            return False, None
        except Exception as exc:
            self._last_commit_failure = time.monotonic()
            self.status.note_error(f"commit: {exc!r}")
            self.commit_failed = True
            self.ctx.metrics.commits.labels("failed").inc()
            log.warning("checkpoint_commit_failed", **self._bind, error=repr(exc)[:300])
            self._commits_failing.failed(time.monotonic())
            return False, None
        tracker.set_committed(cursor)
        self.commit_failed = False
        if ended := self._commits_failing.recovered(time.monotonic()):
            log.info("checkpoint_commit_recovered", **self._bind, cursor=cursor, **ended)
        self.status.last_commit = time.monotonic()
        self.ctx.metrics.commits.labels("ok").inc()
        return True, cursor

    async def _tell_committed(self, cursor: str) -> None:
        """The processor's `committed(cursor)` hook, if it has one: after the commit, outside
        the commit lock (housekeeping never delays the next commit); never once `shutdown` was
        called, nor for a shard abandoned at the end of the shutdown grace. A failure is
        logged, nothing more: the next commit calls it again."""
        processor = self.processor
        if processor is None or processor.committed is None:
            return
        if self.abandoned or self._shutting_down:
            return
        try:
            await processor.committed(cursor)
        except Exception as exc:
            log.warning(
                "processor_committed_hook_failed", **self._bind, error=describe_error(exc)[:300]
            )

    def our_commits(self) -> OurCommits | None:
        """This shard's commits as the checkpoint audit sees them; None while the shard is
        not consuming (starting, stopping, lost, ended: its checkpoint is not ours to judge).
        A shard that read its window or its end (`finished`) and holds it still is judged: a
        forced reset of it is undone as of any held shard (`Supervisor._report`)."""
        consuming = self.status.state in ("consuming", "finished")
        if not consuming or self.lost or self._ended or self.abandoned:
            return None
        quiet = time.monotonic() - self._last_commit_failure > COMMIT_FAILURE_QUIET_S
        return OurCommits(
            task=self._holding,
            attempts=self._commit_attempts,
            last_sent=self._last_sent,
            started_from=self._started_from,
            # A commit in flight, or one that failed lately (it may still land), may move
            # the checkpoint under the read: nothing is judged then.
            settled=quiet and not self._commit_lock.locked(),
        )

    def drop(self) -> None:
        """The server no longer knows us: stop without committing anything more, not even a
        commit in flight (its next attempt is not sent)."""
        self.lost = True
        if self._commit_scope is not None:
            self._commit_scope.cancel()
        self.no_more_retries.set()
        self.request_stop()

    # -- lifecycle ---------------------------------------------------------------------------

    async def _start_position(self) -> str | None:
        """Where a shard without a checkpoint starts: the cursor of `consumer.start`. A start
        time still ahead is waited for (None if the shard is asked to stop meanwhile): the
        service answers a time with nothing at or after it with the shard's end, now, and
        everything written from now until the start would be read."""
        c = self.ctx
        if c.start not in ("begin", "end"):
            wait = float(c.start) + window.WINDOW_SETTLE_S - time.time()
            if wait > 0:
                log.info("shard_waiting_for_start", **self._bind, start=c.start, wait_s=wait)
                if await stopped_within(wait, self.stop_requested):
                    return None
        return await c.client.get_cursor(c.settings.logstore, self.shard, c.start)

    async def _initial(self) -> tuple[str, str | None] | None:
        c = self.ctx
        cps = await c.client.checkpoints(c.settings.logstore, c.group, self.shard)
        saved = next(
            (str(cp.get("checkpoint") or "") for cp in cps if cp.get("shard") == self.shard), ""
        )
        if saved:
            return saved, saved
        start = await self._start_position()
        return None if start is None else (start, None)

    async def _initial_with_retry(self) -> tuple[str, str | None] | None:
        """The start position, retried while the service fails; None if the shard is asked
        to stop meanwhile (revoked while the service is down: nothing to hand over)."""
        attempt = 0
        while True:
            try:
                return await self._initial()
            except (E.ShardNotExist, E.ConsumerGroupNotExist, E.LogStoreNotExist):
                raise
            except E.SlsError as exc:
                attempt += 1
                wait = self.ctx.settings.backoff.wait(attempt)
                log.warning(
                    "shard_start_failed",
                    **self._bind,
                    error=str(exc)[:300],
                    retry_in_s=round(wait, 2),
                )
                if await stopped_within(wait, self.stop_requested):
                    return None

    async def run(self, on_exit: Callable[[ShardTask], Awaitable[None]]) -> None:
        c = self.ctx
        try:
            initial = await self._initial_with_retry()
            if initial is None:
                return
            start, committed = initial
            self.tracker = ShardTracker(
                start,
                committed=committed,
                stopping=self.stop_requested,
                on_problem=self._processor_failing,
            )
            self._started_from = committed or ""
            started = await start_with_retry(
                self._make_processor,
                self.shard,
                c.retry,
                c.metrics,
                self.stop_requested,
                bind=self._bind,
                failing=self._processor_starting_failing,
            )
            if started is None:  # asked to stop while the processor could not (or did not) start
                await self._shut_down_unstarted()
                return
            if isinstance(started, ShardStopped):
                self.status.state, self.status.reason = "failed", started.reason
                return
            self.processor = started
            log.info("shard_started", **self._bind, cursor=start, from_checkpoint=bool(committed))
            self.status.state = "consuming"
            await self._consume()
        except Exception as exc:
            self.status.state, self.status.reason = "failed", describe_error(exc)[:300]
            log.error("shard_failed", **self._bind, error=describe_error(exc)[:500])
        finally:
            with anyio.CancelScope(shield=True):
                await self._finish()
                await on_exit(self)

    async def _make_processor(self) -> LoadedProcessor:
        processor = self.ctx.factory.processor(self.shard)
        self._starting = processor
        try:
            await processor.initialize(self.shard)
        except Exception:
            # A failed start: what it opened is released (a connection made before the
            # failure), and the next attempt makes a new processor.
            await self._shut_down_unstarted(failed=True)
            raise
        self._starting = None
        return processor

    async def _shut_down_unstarted(self, *, failed: bool = False) -> None:
        """A processor whose `initialize` did not finish: cut short by a stop (it waited on
        a sink that is down), or `failed`. It may hold what its start opened (a connection,
        a registration with its factory), so it is shut down, within a bound, like any
        other. After a failed start, a shutdown that fails too is only noted: the start's
        own error is the one that matters."""
        processor, self._starting = self._starting, None
        if processor is None or self.tracker is None:
            return
        try:
            with anyio.fail_after(ABANDONED_CALL_S):
                await processor.shutdown(self.tracker)
        except Exception as exc:
            if failed:
                log.info(
                    "processor_shutdown_after_failed_start", **self._bind, error=repr(exc)[:300]
                )
            else:
                log.error(
                    "processor_shutdown_failed",
                    **self._bind,
                    error=repr(exc)[:300],
                    **traceback_of(exc),
                )

    async def _finish(self) -> None:
        if self.status.state != "failed":
            self.status.state = "stopping"
        if self.tracker is None:
            return
        if self.processor is None:
            # Stopped before a processor ran (revoked while it was starting, or it could not
            # start). Without a checkpoint, the next owner would resolve `consumer.start`
            # again, later: with "end" (or a time) the logs written in between would be read
            # by nobody. The start position found here is saved for it.
            if self.tracker.committed is None:
                await self.commit()
            self._ended = True
            return
        await self.commit()
        await self._shut_down_processor()
        saved = await self._commit_until(
            self.no_more_retries, resend=False, patience=HANDOVER_PATIENCE_S, while_leased=True
        )
        if not saved and not self.lost and not self.no_more_retries.is_set():
            log.error(
                "shard_let_go_uncommitted",
                **self._bind,
                checkpoint=self.tracker.committed,
                detail="the final commit kept failing: the next owner starts from this "
                "checkpoint and repeats what was done after it",
            )
        self._ended = True
        log.info("shard_stopped", **self._bind, checkpoint=self.tracker.committed, lost=self.lost)

    async def _shut_down_processor(self) -> None:
        """`processor.shutdown`, once (at the shard's stop, or at its window's end)."""
        if self._shutting_down or self.processor is None or self.tracker is None:
            return
        self._shutting_down = True
        try:
            with anyio.fail_after(ABANDONED_CALL_S if self.abandoned else 30):
                await self.processor.shutdown(self.tracker)
        except Exception as exc:
            self.shutdown_failed = True
            log.error(
                "processor_shutdown_failed",
                **self._bind,
                error=repr(exc)[:300],
                **traceback_of(exc),
            )

    async def _commit_until(
        self,
        give_up: StopFlag,
        *,
        resend: bool,
        patience: float | None = None,
        while_leased: bool = False,
    ) -> bool:
        """Commit, retried with backoff while it fails (the service is down, the processor's
        flush fails), until it succeeds (True), the shard is lost, `give_up` is set,
        `patience` seconds passed or (`while_leased`) our lease expired.

        Used where the commit is the shard's last word: on a rebalance, the shard stays held
        (listed in heartbeats, so the server keeps it ours, in TRANSFER) until its final
        position is saved, rather than handed over from an older checkpoint, which would
        repeat what was done since (not beyond our lease: the server may have given the shard
        on by then); and at the end of a read-only shard, whose commit is what tells the
        server it is OVER (until the shard is stopped: nothing else would send it)."""
        attempt, since = 0, time.monotonic()
        while not await self.commit(resend=resend):
            if self.lost or give_up.is_set() or (while_leased and not self.ctx.lease_valid()):
                return False
            if patience is not None and time.monotonic() - since >= patience:
                return False
            attempt += 1
            wait = self.ctx.settings.backoff.wait(attempt)
            log.warning("final_commit_retry", **self._bind, retry_in_s=round(wait, 2))
            if await stopped_within(wait, give_up):
                return await self.commit(resend=resend)
        return True

    def request_stop(self) -> None:
        """Finish the batch in hand (if any), then stop. Waiting for data is interrupted; a
        batch being processed never is, but a failing one is not tried again (the processor
        sees `tracker.stopping`)."""
        self.stop_requested.set()
        if self._waiting is not None:
            self._waiting.cancel()

    async def _next(self, receive: anyio.abc.ObjectReceiveStream[Item]) -> Item | Redeliver | None:
        """The next item, or None when the fetcher is done or a stop was requested. While
        waiting, a processor with `redelivery()` is asked every `REDELIVERY_POLL_S`; a cursor
        it gives comes back as `Redeliver`."""
        if self.stop_requested.is_set():
            return None
        assert self.processor is not None
        redelivery = self.processor.redelivery
        with anyio.CancelScope() as self._waiting:
            try:
                if redelivery is None:
                    return await receive.receive()
                while True:
                    # anyio does not cancel a receive whose item was handed over: a batch
                    # arriving as the wait ends is returned, never dropped.
                    with anyio.move_on_after(REDELIVERY_POLL_S):
                        return await receive.receive()
                    cursor = await self._ask_redelivery(redelivery)
                    if cursor is not None:
                        return Redeliver(cursor)
            except anyio.EndOfStream:
                return None
            finally:
                self._waiting = None
        return None  # cancelled by request_stop

    async def _ask_redelivery(self, redelivery: Callable[[], Awaitable[object]]) -> str | None:
        """The processor's `redelivery()`: a cursor, or None. One that raises or answers
        something else is logged (and noted on the shard) and asked again next time: the
        shard goes on waiting for data, as it would without the hook."""
        try:
            cursor = await redelivery()
        except Exception as exc:
            reason = describe_error(exc)
        else:
            if cursor is None or (isinstance(cursor, str) and cursor):
                return cursor
            reason = f"returned {cursor!r}, not a cursor or None"
        log.warning("processor_redelivery_failed", **self._bind, error=reason)
        self.status.note_error(f"redelivery: {reason}")
        return None

    async def _consume(self) -> None:
        assert self.tracker is not None
        tracker = self.tracker
        while not self.stop_requested.is_set():
            send, receive = anyio.create_memory_object_stream[Item](0)
            rollback: str | None = None
            async with anyio.create_task_group() as tg, receive:
                tg.start_soon(self._fetch, tracker.fetch_cursor, send)
                tg.start_soon(self._watch_lag_while_held)
                while (item := await self._next(receive)) is not None:
                    if isinstance(item, Redeliver):  # asked for while waiting
                        rollback = item.cursor
                    elif isinstance(item, Batch):
                        if self.status.fetch.found_nothing_at > self.status.last_progress:
                            self.status.last_progress = time.monotonic()  # work after a spell
                        try:
                            rollback = await self._handle(item)
                        finally:
                            self.ctx.budget.handled(item)
                    elif isinstance(item, EndOfShard):
                        await self._end_of_shard(item.cursor)
                    elif isinstance(item, EndOfWindow):
                        await self._end_of_window(item.cursor)
                    elif isinstance(item, Skipped):  # filtered out by the server's query
                        tracker.done(tracker.fetched(item.cursor, item.next_cursor))
                        self.status.last_progress = time.monotonic()
                    elif isinstance(item, CaughtUp):  # the batches before it are done
                        await self.commit()
                    else:
                        assert isinstance(item, CursorReset)
                        tracker.rollback(item.cursor)
                    if rollback is not None:
                        break
                tg.cancel_scope.cancel()  # drop the prefetched batch, if any
            if rollback is not None:
                log.info("shard_rollback", **self._bind, cursor=rollback)
                tracker.rollback(rollback)
            elif self.status.state == "finished":
                await self.stop_requested.wait()

    async def _fetch(self, cursor: str, send: anyio.abc.ObjectSendStream[Item]) -> None:
        c = self.ctx
        await run_fetcher(
            c.client,
            c.settings,
            self.shard,
            cursor,
            send,  # type: ignore[arg-type]
            budget=c.budget,
            catalog=c.catalog,
            metrics=c.metrics,
            status=self.status.fetch,
            start_position=self._start_position,
            bind=self._bind,
            window_end=self._window_end if c.end is not None else None,
            on_error=self.status.note_error,
        )

    async def _window_end(self) -> str | None:
        end = self.ctx.end
        assert end is not None
        c = self.ctx
        return await window.end_cursor(c.client, c.settings.logstore, self.shard, end, self._bind)

    async def _handle(self, batch: Batch) -> str | None:
        assert self.tracker is not None and self.processor is not None
        tracker = self.tracker
        if not self.ctx.lease_valid() and not await self._wait_for_lease(batch):
            return None
        token = tracker.fetched(batch.cursor, batch.next_cursor)
        tracker.begin(token)
        self._in_hand_since = time.monotonic()
        try:
            outcome = await process_with_retry(
                self.processor,
                batch,
                tracker,
                self.ctx.retry,
                self.ctx.metrics,
                mark_done=lambda: tracker.done(token),
                bind=self._bind,
                failing=self._processor_failing,
            )
        except BaseException:  # cancelled: the shard abandoned at the end of the grace
            tracker.left_unfinished(token)
            raise
        finally:
            self._in_hand_since = None
        if isinstance(outcome, (ShardStopped, Interrupted)):
            # The batch stays unfinished (the next owner reads it), even if the processor's
            # `shutdown` saves a checkpoint the SDK way.
            tracker.left_unfinished(token)
        if isinstance(outcome, ShardStopped):
            self.status.state, self.status.reason = "failed", outcome.reason
            self.request_stop()
            return None
        if isinstance(outcome, Interrupted):  # stopping anyway
            return None
        logs = batch.known_log_count  # almost always: the processor has read the logs
        if logs is None:  # decoding is never done on the event loop
            logs = await anyio.to_thread.run_sync(lambda: batch.log_count)
        label = str(self.shard)
        m = self.ctx.metrics
        m.consumed_logs.labels(label).inc(logs)
        m.consumed_bytes.labels(label).inc(batch.raw_size or len(batch.raw))
        m.consumed_batches.labels(label).inc()
        status = self.status
        status.batches, status.logs = status.batches + 1, status.logs + logs
        status.bytes += batch.raw_size or len(batch.raw)
        m.last_batch_time.labels(label).set_to_current_time()
        fetch = self.status.fetch
        fetch.group_size = group_size.observe(fetch.group_size, logs, batch.group_count)
        self.status.last_progress = time.monotonic()
        if tracker.take_commit_request():
            await self.commit()
        if isinstance(outcome, DeadLettered):
            return None
        assert isinstance(outcome, Processed)
        return outcome.rollback

    async def _watch_lag_while_held(self) -> None:
        """While one batch stays in the processor (its sink down, retried inside `process` or
        by the failure policy), the fetcher waits to hand over the next and measures nothing:
        the lag would stay at what it was, "caught up" at worst, while logs pile up. So every
        `LAG_PROBE_INTERVAL_S` of such a wait, the lag is measured here, from the oldest
        unfinished position: what is not processed yet, and how old it is."""
        c = self.ctx
        while True:
            await anyio.sleep(LAG_PROBE_INTERVAL_S)
            since, tracker = self._in_hand_since, self.tracker
            if since is None or tracker is None or time.monotonic() - since < LAG_PROBE_INTERVAL_S:
                continue
            fetch = self.status.fetch
            await probe_lag(
                c.client, c.settings.logstore, self.shard, tracker.get_checkpoint(), fetch,
                c.metrics,
            )  # fmt: skip
            if fetch.lag_log_groups:
                fetch.caught_up = False

    def _processor_failing(self, reason: str, stage: str = "process") -> None:
        """Why the processor's `stage` (`process`, or `initialize` while it starts) is failing;
        "" once it is through."""
        self.status.processor_error = reason
        if reason:
            self.status.note_error(f"{stage}: {reason}")

    def _processor_starting_failing(self, reason: str) -> None:
        self._processor_failing(reason, "initialize")

    async def _wait_for_lease(self, batch: Batch) -> bool:
        """Our lease has expired (heartbeats failed past the timeout, or we were paused):
        another consumer may own the shard by now, so processing could only duplicate. Hold
        the batch until the heartbeat renews the lease (True: process it) or the shard is
        dropped or stopped (False: it is redelivered from the checkpoint)."""
        log.warning("lease_expired_batch_held", **self._bind, cursor=batch.cursor)
        self._held_since = time.monotonic()
        try:
            while not self.stop_requested.is_set():
                if self.ctx.lease_valid():
                    log.info("lease_renewed_batch_released", **self._bind, cursor=batch.cursor)
                    return True
                await anyio.sleep(LEASE_POLL_S)
            return False
        finally:
            self._held_since = None

    async def _end_of_shard(self, cursor: str) -> None:
        """A read-only shard is drained: commit its end now so the server can mark it OVER.
        Sent even when that position is already committed: a commit made before the shard
        became read-only (a caught-up shard, then split) did not end it, and in an ordered
        group its children wait for it. Retried until the server has it."""
        assert self.tracker is not None
        log.info("shard_end_reached", **self._bind, cursor=cursor)
        self.status.state = "finished"
        self.status.fetch.caught_up = True
        if await self._commit_until(self.stop_requested, resend=True):
            self.ctx.on_finished()

    async def _end_of_window(self, cursor: str) -> None:
        """A bounded run read the shard up to its window's end: commit it (fenced) and hold
        the shard, idle, until the daemon stops (the whole group may not be done yet). A
        processor still holding batches is shut down first, so that it writes them."""
        assert self.tracker is not None
        log.info("shard_window_end_reached", **self._bind, cursor=cursor)
        self.status.state = "finished"
        self.status.fetch.caught_up = True
        await self.commit()
        committed = self.tracker.committed
        if committed is None or not window.reached(committed, cursor):
            # Batches the processor still holds (deferred: `parquet` buffers rows until a
            # file rolls). No batch follows the window's end: it shuts down now and writes
            # them, instead of at its own `max_age_s` while the whole run waits.
            await self._shut_down_processor()
        if await self._commit_until(self.stop_requested, resend=False):
            self.ctx.on_finished()

    def checkpoint_age(self) -> float:
        """`loghubd_checkpoint_age_seconds`: 0 when everything fetched is committed, else the
        seconds since the committed position last moved (or last held nothing back). Steady
        consumption keeps it below `checkpoint_interval`; a stuck batch, a processor that
        never acks or failing commits make it grow."""
        tracker = self.tracker
        if tracker is None or tracker.committed == tracker.fetch_cursor:
            return 0.0
        return max(0.0, time.monotonic() - self.status.last_commit)

    def snapshot(self, now: float, started_at: float) -> ShardSnapshot:
        """This shard as it is now; `now` and `started_at` (the source's start) monotonic."""
        status, fetch = self.status, self.status.fetch
        state, reason = shown_state(
            status.state, status.reason, self.ctx.lease_valid(), self._held_since, now
        )
        return ShardSnapshot(
            shard=self.shard,
            state=state,
            reason=reason,
            processor_error=status.processor_error,
            cursor=fetch.cursor,
            checkpoint=self.tracker.committed if self.tracker else None,
            caught_up=status.caught_up,
            lag_log_groups=fetch.lag_log_groups,
            lag_seconds=fetch.lag_seconds,
            cursor_time=None if status.caught_up else fetch.cursor_time,
            seconds_since_progress=now - status.last_progress,
            seconds_since_pull=now - (fetch.last_pull or started_at),
            pull_failing_for=None
            if fetch.pulls.failing_since is None
            else max(0.0, now - fetch.pulls.failing_since),
            pull_error=fetch.pull_error,
            checkpoint_age=self.checkpoint_age(),
            batches=status.batches,
            logs=status.logs,
            bytes=status.bytes,
            last_error=status.last_error,
        )
