"""Process one batch with the retry policy (the processor's calls are `LoadedProcessor`s:
sync or async was decided when it was made, `loghubd.plugins.loaded`).

A failing batch is retried with exponential backoff and jitter, never skipped silently and
never in a tight loop. After `max_attempts` (0 = unlimited) the policy decides: keep
retrying, write the batch to the dead-letter directory and go on, or stop the shard. A
processor that raises `BatchRejected` (retrying cannot help) gets the policy at once.

A stop (shutdown, rebalance, ownership lost: `tracker.stopping`) never cuts an attempt short,
but it ends the waiting between attempts: the failing batch is then `Interrupted`, neither
done nor failed, and the next owner reads it again. A processor that retries inside `process`
says the same by raising `BatchInterrupted` once it sees the stop.
"""

from __future__ import annotations

import json
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import structlog

from loghubd.backoff import Backoff
from loghubd.consumer.tracking import until_stopping
from loghubd.errors import describe_error, leaves
from loghubd.faults import Episode
from loghubd.files import atomic_write, fsync_dir
from loghubd.logging import traceback_of
from loghubd.models import Batch
from loghubd.ops.metrics import Metrics
from loghubd.plugins.api import BatchInterrupted, BatchRejected, StopSignal, Tracker
from loghubd.plugins.loaded import LoadedProcessor

log = structlog.get_logger("loghubd.worker")

# Dead letters (the raw batch and its note): readable by the daemon's user and group only,
# less what the umask takes away. They hold the logs outside the output's own permissions.
LETTER_MODE = 0o640


PROCESSOR_BACKOFF = Backoff(initial=0.5, cap=30.0, jitter=0.5)


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    max_attempts: int = 0  # 0: retry for ever
    on_failure: str = "retry"  # "retry" | "dead_letter" | "stop", once max_attempts is reached
    # Doubles each time, half of it jittered: the waits grow while retrying processes do not
    # synchronise (`consumer.retry_initial_backoff`, `processor_retry_max_backoff`).
    backoff: Backoff = PROCESSOR_BACKOFF
    dead_letter_dir: Path = Path("dead-letter")
    # Where the batches come from, written into each dead letter's note (`origin`): several
    # sources may share one directory, and a replay takes only its own source's letters.
    origin: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Processed:
    rollback: str | None = None  # a cursor the processor asked to re-read from


@dataclass(frozen=True, slots=True)
class DeadLettered:
    path: Path


@dataclass(frozen=True, slots=True)
class ShardStopped:
    reason: str


@dataclass(frozen=True, slots=True)
class Interrupted:
    """The shard began to stop while the batch was failing: it is left unfinished."""

    reason: str


Outcome = Processed | DeadLettered | ShardStopped | Interrupted


async def process_with_retry(
    processor: LoadedProcessor,
    batch: Batch,
    tracker: Tracker,
    policy: RetryPolicy,
    metrics: Metrics,
    *,
    mark_done: Callable[[], None],
    bind: dict[str, Any],
    failing: Callable[[str], None] = lambda reason: None,
) -> Outcome:
    """Process `batch` until it succeeds or the policy gives up. `failing` is told why each
    failed attempt failed, and "" once the batch is through (the shard's status shows it)."""
    attempt = 0
    failures = Episode()  # `process_recovered` when an attempt succeeds after failed ones
    while True:
        attempt += 1
        started = time.perf_counter()
        try:
            result = await processor.process(batch, tracker)
        except Exception as exc:
            failures.failed(time.monotonic())
            error = describe_error(exc)
            if tracker.stopping.is_set() and any(
                isinstance(e, BatchInterrupted) for e in leaves(exc)
            ):
                return _interrupted(batch, attempt, error, bind)
            rejected = any(isinstance(e, BatchRejected) for e in leaves(exc))
            failing(f"attempt {attempt} at cursor {batch.cursor}: {error}"[:300])
            metrics.processor_errors.labels(str(batch.shard)).inc()
            log.warning(
                "process_failed",
                **bind,
                attempt=attempt,
                cursor=batch.cursor,
                rejected=rejected,
                error=error[:500],
                **traceback_of(exc),
            )
            if rejected or (policy.max_attempts and attempt >= policy.max_attempts):
                if policy.on_failure == "dead_letter":
                    path = await _set_aside(
                        policy, batch, exc, attempt, rejected, tracker, bind, failing
                    )
                    if path is None:  # the shard began to stop while the letter could not be
                        return _interrupted(batch, attempt, error, bind)  # written
                    mark_done()
                    failing("")
                    metrics.dead_lettered.labels(str(batch.shard)).inc()
                    log.error("batch_dead_lettered", **bind, cursor=batch.cursor, path=str(path))
                    return DeadLettered(path)
                if policy.on_failure == "stop":
                    how = "rejected the batch" if rejected else f"failed {attempt} times"
                    reason = f"processor {how} at cursor {batch.cursor}: {error}"
                    log.error("shard_stopped_on_failure", **bind, reason=reason[:500])
                    return ShardStopped(reason)
            wait = policy.backoff.wait(attempt)
            metrics.processor_retries.labels(str(batch.shard)).inc()
            log.info("process_retry_scheduled", **bind, attempt=attempt, wait_s=round(wait, 3))
            if await stopped_within(wait, tracker.stopping):
                return _interrupted(batch, attempt, error, bind)
            continue
        failing("")  # also what the processor noted while it retried (`note_problem`)
        if ended := failures.recovered(time.monotonic()):
            log.info("process_recovered", **bind, cursor=batch.cursor, **ended)
        metrics.process_seconds.labels(str(batch.shard)).observe(time.perf_counter() - started)
        return Processed(result if isinstance(result, str) and result else None)


async def stopped_within(seconds: float, stopping: StopSignal) -> bool:
    """Wait `seconds`, or less if `stopping` is set meanwhile (then True)."""
    if not stopping.is_set():
        with anyio.move_on_after(seconds):
            await stopping.wait()
    return stopping.is_set()


def _interrupted(batch: Batch, attempts: int, error: str, bind: dict[str, Any]) -> Interrupted:
    log.warning(
        "batch_interrupted",
        **bind,
        cursor=batch.cursor,
        attempts=attempts,
        error=error[:500],
        detail="the shard is stopping while this batch fails: it is left unfinished, "
        "and read again by the next owner",
    )
    return Interrupted(f"stopped after {attempts} failed attempts at cursor {batch.cursor}")


async def start_with_retry(
    make: Callable[[], Awaitable[LoadedProcessor]],
    shard: int,
    policy: RetryPolicy,
    metrics: Metrics,
    stop: StopSignal,
    *,
    bind: dict[str, Any],
    failing: Callable[[str], None] = lambda reason: None,
) -> LoadedProcessor | ShardStopped | None:
    """Make and initialize a shard's processor under the same policy as a failing batch: a
    processor that cannot start (an output directory it cannot create, a sink that is down)
    is retried with backoff and counted in `processor_errors_total`; after `max_attempts`,
    `stop` stops the shard (parked: held, not consumed), `retry` and `dead_letter` keep
    trying (there is no batch to set aside, and a shard stopped for what is a sink's or a
    directory's problem would stay unconsumed after the cause is gone). None when `stop` is
    set while waiting to try again, or while the processor starts (nothing was processed yet:
    a start that hangs on a sink that is down is given up at once)."""
    attempt = 0
    while True:
        attempt += 1
        if stop.is_set():  # the shard was revoked before its processor was made
            return None
        try:
            started, processor = await until_stopping(stop, make)
            if not started:
                log.info("processor_start_abandoned", **bind, attempt=attempt)
                return None
        except Exception as exc:
            reason = f"processor cannot start on shard {shard}: {describe_error(exc)}"
            failing(f"attempt {attempt}: {reason}"[:500])
            metrics.processor_errors.labels(str(shard)).inc()
            log.warning(
                "processor_start_failed",
                **bind,
                attempt=attempt,
                error=reason[:1000],
                **traceback_of(exc),
            )
            gave_up = policy.max_attempts and attempt >= policy.max_attempts
            if gave_up and policy.on_failure == "stop":
                log.error("shard_stopped_on_failure", **bind, reason=reason[:1000])
                return ShardStopped(f"{reason} (after {attempt} attempts)")
            wait = policy.backoff.wait(attempt)
            metrics.processor_retries.labels(str(shard)).inc()
            log.info("processor_start_retry_scheduled", **bind, attempt=attempt, wait_s=wait)
            if await stopped_within(wait, stop):
                return None
            continue
        if attempt > 1:
            failing("")
        assert processor is not None
        return processor


async def _set_aside(
    policy: RetryPolicy,
    batch: Batch,
    exc: BaseException,
    attempts: int,
    rejected: bool,
    tracker: Tracker,
    bind: dict[str, Any],
    failing: Callable[[str], None],
) -> Path | None:
    """Write the dead letter, retried with the policy's backoff while it cannot be written
    (a full disk, a directory not writable): the batch is set aside only once its letter is
    there, and a brief problem must not stop the shard. None if the shard begins to stop
    first (the batch is then left unfinished, and read again)."""
    tries = 0
    while True:
        try:
            return await anyio.to_thread.run_sync(
                _write_dead_letter, policy, batch, exc, attempts, rejected
            )
        except OSError as write_error:
            tries += 1
            wait = policy.backoff.wait(tries)
            where = policy.dead_letter_dir.absolute()
            failing(f"cannot write the dead letter to {where}: {describe_error(write_error)}"[:300])
            log.error(
                "dead_letter_write_failed",
                **bind,
                cursor=batch.cursor,
                directory=str(where),
                error=describe_error(write_error)[:300],
                retry_in_s=round(wait, 2),
            )
            if await stopped_within(wait, tracker.stopping):
                return None


def _write_dead_letter(
    policy: RetryPolicy, batch: Batch, exc: BaseException, attempts: int, rejected: bool
) -> Path:
    """The batch's raw LogGroupList (lossless) plus a JSON note of where and why; fsynced.
    Returns the note's absolute path (logged: a relative dead_letter_dir is the daemon's
    working directory's, not the operator's).

    A letter for the same range of the same origin written before (a daemon that crashed
    after setting the batch aside, before its checkpoint passed it, read it again and set it
    aside again) is removed once this one is whole: one letter per range, so a replay does
    not send it twice."""
    folder = policy.dead_letter_dir / f"shard-{batch.shard}"
    if not folder.is_dir():
        # Made owner-and-group only, as the letters are (LETTER_MODE): they hold raw logs.
        policy.dead_letter_dir.mkdir(mode=0o750, parents=True, exist_ok=True)
        folder.mkdir(mode=0o750, exist_ok=True)
        for made in (folder.parent, folder.parent.parent):  # the new names, before a
            fsync_dir(made)  # checkpoint passes the batch
    cursor_part = batch.cursor.rstrip("=")
    earlier = [
        note
        for note in folder.glob(f"*-{cursor_part}.json")
        if _same_letter(note, batch, dict(policy.origin))
    ]
    stem = f"{time.time_ns()}-{cursor_part}"
    raw_path = folder / f"{stem}.pb"
    meta = {
        "origin": dict(policy.origin),
        "shard": batch.shard,
        "cursor": batch.cursor,
        "next_cursor": batch.next_cursor,
        "log_groups": batch.group_count,
        "attempts": attempts,
        "error": describe_error(exc),
        "rejected": rejected,
        "traceback": "".join(traceback.format_exception(exc)),
        "data": raw_path.name,
    }
    # The data first, then the note that names it (what the commands list): each whole or
    # not there at all, so a crash never leaves a note cut short.
    # Raw logs, outside the output's own permissions: owner and group only.
    atomic_write(raw_path, batch.raw, mode=LETTER_MODE)
    atomic_write(folder / f"{stem}.json", json.dumps(meta, indent=2).encode(), mode=LETTER_MODE)
    for note in earlier:  # the note first: a .pb without one is listed as incomplete
        note.unlink(missing_ok=True)
        note.with_suffix(".pb").unlink(missing_ok=True)
    return (folder / f"{stem}.json").absolute()


def _same_letter(note: Path, batch: Batch, origin: dict[str, str]) -> bool:
    """Whether the letter `note` holds exactly `batch`'s range, from the same origin."""
    try:
        meta = json.loads(note.read_text())
    except (OSError, ValueError):
        return False  # unreadable: not ours to remove (`dead-letters list` names it)
    return (
        isinstance(meta, dict)
        and meta.get("cursor") == batch.cursor
        and meta.get("next_cursor") == batch.next_cursor
        and meta.get("origin", {}) == origin
    )
