"""Per-shard fetch loop: pull from a cursor, hand batches on (one prefetched ahead), pace.

Pacing follows how full the last pull was: a full pull means we are behind, so the next pull
starts at once; a partial one sleeps the unfilled fraction of `fetch_interval`; an empty one
sleeps all of it, and each further empty one twice as long, up to `idle_fetch_interval`
(`loghubd.consumer.pacing`). The first pull that is not full after full ones is reported as
`CaughtUp`, so the end of a backlog is committed at once, not one checkpoint interval later;
polls while caught up report nothing. The end of a read-only shard is reported as
`EndOfShard` so its end cursor can be committed at once, also when it never held data. An
expired cursor (InvalidCursor) restarts from the configured start position, loudly.

Bounded runs (`consumer.end`, `loghubd.consumer.window`): `window_end` resolves the end of
the window to a cursor (None while the end time is still ahead); pulls then stop there
(`end_cursor`) and reaching it is reported as `EndOfWindow`. A position already past it (an
older checkpoint of the group) counts as reached: the window is never read backwards.

Failed calls are retried with `FetchSettings.backoff` (`consumer.pull_retry_max_backoff`);
each failure is logged and told to `on_error` (the shard's last error, in its snapshot).
From a failed pull until one is answered the shard's lag is unknown: `FetchStatus` says so
(`pulls`, an episode of failures; not caught up) and the lag gauges are NaN; the first
answered pull logs `pull_recovered` once and measures the lag again.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import anyio
import structlog
from anyio.streams.memory import MemoryObjectSendStream

from loghubd.backoff import Backoff
from loghubd.consumer.budget import ByteBudget
from loghubd.consumer.group_size import GroupSize
from loghubd.consumer.inflight import Grant
from loghubd.consumer.pacing import pause_before_next_pull
from loghubd.consumer.window import reached
from loghubd.faults import Episode
from loghubd.models import Batch
from loghubd.ops.metrics import Metrics
from loghubd.protocol import cursor as cursors
from loghubd.protocol import errors as E
from loghubd.sls import Pulled, SlsClient
from loghubd.sls.errors import AnswerTooLarge

log = structlog.get_logger("loghubd.fetcher")

# The largest PullLogs answer (on the wire, and decoded) a pull takes: 4 x the byte budget,
# at least 256 MiB. The budget picks a count whose answer should fit it many times over (an
# SLS log group is at most a few MB); past the cap, the endpoint is not behaving like SLS.
MIN_ANSWER_CAP = 256 * 1024 * 1024

# A pull this large is "full" even below the group count: the server capped it by size.
FULL_PULL_BYTES = 4 * 1024 * 1024
CATALOG_TTL_S = 10.0
LAG_PROBE_INTERVAL_S = 5.0
PULL_BACKOFF = Backoff(initial=0.4, cap=30.0)


@dataclass(frozen=True, slots=True)
class EndOfShard:
    cursor: str


@dataclass(frozen=True, slots=True)
class CursorReset:
    cursor: str
    reason: str


@dataclass(frozen=True, slots=True)
class Skipped:
    """Log groups the server scanned but its SPL query filtered to nothing: nothing to
    process, but the checkpoint may move past them (a selective query never stalls it)."""

    cursor: str
    next_cursor: str


@dataclass(frozen=True, slots=True)
class EndOfWindow:
    """A bounded run reached the end of its window at `cursor` (see `consumer.end`)."""

    cursor: str


@dataclass(frozen=True, slots=True)
class CaughtUp:
    """The shard has just caught up with the end of a backlog at `cursor` (the first pull that
    was not full after full ones): once the batches before it are done, their position is
    committed at once instead of at the next checkpoint interval. Sent once per catch-up, not
    for every poll while caught up."""

    cursor: str


Item = Batch | EndOfShard | CursorReset | Skipped | EndOfWindow | CaughtUp


class ShardCatalog:
    """Which shards are read-only, from ListShards, cached for a few seconds (one call serves
    every shard task of the logstore)."""

    def __init__(self, client: SlsClient, logstore: str) -> None:
        self._client = client
        self._logstore = logstore
        self._readonly: dict[int, bool] = {}
        self._at = -CATALOG_TTL_S
        self._lock = anyio.Lock()

    async def is_readonly(self, shard: int) -> bool:
        async with self._lock:
            if time.monotonic() - self._at > CATALOG_TTL_S or shard not in self._readonly:
                shards = await self._client.list_shards(self._logstore)
                self._readonly = {int(s["shardID"]): s.get("status") == "readonly" for s in shards}
                self._at = time.monotonic()
        return self._readonly.get(shard, False)


@dataclass
class FetchStatus:
    """What the ops surface reads about a shard's fetching."""

    cursor: str = ""
    caught_up: bool = False
    lag_log_groups: int | None = None
    lag_seconds: float | None = None
    # Unix time the log group at `cursor` was written (None: caught up, or not measured yet)
    cursor_time: float | None = None
    last_pull: float = 0.0  # monotonic
    found_nothing_at: float = 0.0  # monotonic: the last answered pull that brought nothing
    # Logs per log group lately (`group_size`), kept by the shard task: the lag in logs.
    group_size: GroupSize = field(default_factory=GroupSize)
    # The failed pulls since the last answered one (monotonic clock; `pull_recovered` when
    # one is answered), and why the last failed: the lag is not known meanwhile.
    pulls: Episode = field(default_factory=Episode)
    pull_error: str = ""

    @property
    def logs_per_group(self) -> float:
        """What a lag in log groups is multiplied by (1 until a batch was read)."""
        mean = self.group_size.mean
        return 1.0 if mean is None else mean


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchSettings:
    logstore: str
    max_log_groups: int
    fetch_interval: float
    # The longest pause between pulls of a shard that keeps bringing nothing (pacing.py).
    idle_fetch_interval: float = 0.0
    # Failed pulls and start-position look-ups (`consumer.pull_retry_max_backoff`).
    backoff: Backoff = PULL_BACKOFF
    query: str | None = None


async def run_fetcher(
    client: SlsClient,
    settings: FetchSettings,
    shard: int,
    start: str,
    send: MemoryObjectSendStream[Item],
    *,
    budget: ByteBudget,
    catalog: ShardCatalog,
    metrics: Metrics,
    status: FetchStatus,
    start_position: Callable[[], Awaitable[str | None]],  # None: the shard stops
    bind: dict[str, object],
    window_end: Callable[[], Awaitable[str | None]] | None = None,
    on_error: Callable[[str], None] = lambda message: None,
) -> None:
    cursor = start
    failures = 0
    next_lag_probe = 0.0
    label = str(shard)
    stop_at: str | None = None  # the end of a bounded run's window, once resolved
    behind = False  # the last pull was full: there is a backlog (see CaughtUp)
    delivered = False  # something was handed on since we were last caught up
    empty_in_a_row = 0  # pulls that brought no log group at all, the last one included
    max_groups = settings.max_log_groups  # fewer once an answer was past the cap (_pull)
    async with send:
        while True:
            if window_end is not None and stop_at is None:
                try:
                    stop_at = await window_end()
                except E.SlsError as exc:
                    failures += 1
                    await _back_off("window_end_failed", exc, failures, settings, bind, on_error)
                    continue
            if stop_at is not None and reached(cursor, stop_at):
                status.cursor, status.caught_up = cursor, True
                status.lag_log_groups, status.lag_seconds = 0, 0.0
                for gauge in (metrics.lag_log_groups, metrics.lag_logs, metrics.lag_seconds):
                    gauge.labels(label).set(0)
                await send.send(EndOfWindow(cursor))
                return
            started = time.perf_counter()
            try:
                grant, pulled, max_groups = await _pull(
                    client, settings, budget, shard, cursor, stop_at, max_groups
                )
            except E.InvalidCursor as exc:
                try:
                    fresh = await start_position()
                    if fresh is None:
                        return
                except E.SlsError as lookup:
                    failures += 1
                    await _back_off(
                        "restart_position_failed", lookup, failures, settings, bind, on_error
                    )
                    continue
                log.warning(
                    "cursor_invalid_restarting",
                    **bind,
                    cursor=cursor,
                    restart_at=fresh,
                    error=str(exc),
                )
                cursor = fresh
                await send.send(CursorReset(fresh, str(exc)))
                continue
            except (E.ShardNotExist, E.LogStoreNotExist):
                raise
            except (E.ParameterInvalid, E.NotSupported) as exc:
                # The service refuses this pull as such (e.g. a query outside what it
                # supports): retrying cannot help. The shard stops; readiness says why.
                log.error("pull_refused", **bind, error=str(exc))
                raise
            except E.SlsError as exc:
                failures += 1
                status.pulls.failed(time.monotonic())
                _lag_unknown(status, str(exc), metrics, label)
                await _back_off("pull_failed", exc, failures, settings, bind, on_error)
                continue
            failures = 0
            now = time.monotonic()
            if ended := status.pulls.recovered(now):
                log.info("pull_recovered", **bind, **ended)
                next_lag_probe = now  # the lag was unknown: measure it with this answer
                status.pull_error = ""
            metrics.fetch_seconds.labels(label).observe(time.perf_counter() - started)
            status.last_pull = now
            if pulled.raw_lines is not None and pulled.result_lines is not None:
                dropped = pulled.raw_lines - pulled.result_lines
                if dropped > 0:
                    metrics.filtered_logs.labels(label).inc(dropped)
            if pulled.count:
                batch = Batch(
                    shard, cursor, pulled.next_cursor, pulled.data, pulled.count, pulled.raw_size
                )
                capped = pulled.raw_data_size >= FULL_PULL_BYTES
                await budget.hand_over(grant, pulled.raw_count, batch, send, capped=capped)
                delivered = True
            else:
                budget.cancel(grant, pulled.raw_count)
                if pulled.next_cursor != cursor:
                    await send.send(Skipped(cursor, pulled.next_cursor))
                    delivered = True
            cursor = pulled.next_cursor
            status.cursor = cursor
            if stop_at is not None and reached(cursor, stop_at):
                continue  # the window is done: reported at the top of the loop
            # Full: all the groups asked for (the budget may ask for fewer than
            # max_log_groups) or capped by size: we are behind, pull again at once.
            full = pulled.raw_count >= grant.groups or pulled.raw_data_size >= FULL_PULL_BYTES
            status.caught_up = not full
            if behind and delivered and not full:
                await send.send(CaughtUp(cursor))
            behind = full
            delivered = delivered and behind
            if not pulled.raw_count:
                status.found_nothing_at = now
                status.lag_log_groups, status.lag_seconds = 0, 0.0
                metrics.lag_log_groups.labels(label).set(0)
                metrics.lag_logs.labels(label).set(0)
                metrics.lag_seconds.labels(label).set(0)
                if await _at_end_of_readonly_shard(
                    client, catalog, settings.logstore, shard, cursor, pulled.end_of_cursor, bind
                ):
                    await send.send(EndOfShard(cursor))
                    return
            elif now >= next_lag_probe:
                next_lag_probe = now + LAG_PROBE_INTERVAL_S
                await probe_lag(client, settings.logstore, shard, cursor, status, metrics)
            empty_in_a_row = 0 if pulled.raw_count else empty_in_a_row + 1
            if full:
                continue
            await anyio.sleep(
                pause_before_next_pull(
                    pulled.raw_count / settings.max_log_groups,
                    empty_in_a_row,
                    settings.fetch_interval,
                    settings.idle_fetch_interval,
                )
            )


async def _pull(
    client: SlsClient,
    settings: FetchSettings,
    budget: ByteBudget,
    shard: int,
    cursor: str,
    stop_at: str | None,
    max_groups: int,
) -> tuple[Grant, Pulled, int]:
    """One pull within the byte budget: room is reserved before the request is sent, and the
    request asks for no more log groups than that room holds. A failed pull gives the room
    back; after an answer the caller hands it over with its batch, or cancels it.

    An answer above the cap (`MIN_ANSWER_CAP`) is refused unread and asked for again with
    half as many log groups, down to one. Returns the grant, the answer and the most log
    groups the shard's next pulls may ask for (`max_groups`, or the count that fitted), so
    that a large answer is not downloaded again."""
    cap = max(MIN_ANSWER_CAP, 4 * budget.limit)
    groups = max_groups
    while True:
        grant = await budget.reserve(shard, groups)
        try:
            pulled = await client.pull(
                settings.logstore,
                shard,
                cursor,
                grant.groups,
                end_cursor=stop_at,
                query=settings.query,
                max_bytes=cap,
            )
        except AnswerTooLarge as exc:
            budget.cancel(grant)
            if grant.groups <= 1:
                raise
            groups = max_groups = grant.groups // 2
            log.warning(
                "pull_answer_too_large",
                logstore=settings.logstore,
                shard=shard,
                error=str(exc),
                asked_groups=grant.groups,
                next_groups=groups,
            )
            continue
        except BaseException:
            budget.cancel(grant)
            raise
        return grant, pulled, max_groups


async def _back_off(
    event: str,
    exc: E.SlsError,
    failures: int,
    settings: FetchSettings,
    bind: dict[str, object],
    on_error: Callable[[str], None],
) -> None:
    """Log a failed call and wait before the next try (exponential, capped)."""
    on_error(f"{event.removesuffix('_failed').replace('_', ' ')}: {exc}")
    wait = settings.backoff.wait(failures)
    log.warning(event, **bind, error=str(exc), attempt=failures, wait_s=round(wait, 2))
    await anyio.sleep(wait)


async def _at_end_of_readonly_shard(
    client: SlsClient,
    catalog: ShardCatalog,
    logstore: str,
    shard: int,
    cursor: str,
    end_of_cursor: bool,
    bind: dict[str, object],
) -> bool:
    """Whether an empty pull at `cursor` means the shard is read-only and fully read. A
    service that cannot answer right now means "not known yet": the next empty pull asks
    again, so an outage never stops the shard task."""
    try:
        if not (end_of_cursor or await catalog.is_readonly(shard)):
            return False
        return await client.get_cursor(logstore, shard, "end") == cursor
    except (E.ShardNotExist, E.LogStoreNotExist):
        raise
    except E.SlsError as exc:
        log.warning("end_of_shard_check_failed", **bind, error=str(exc))
        return False


def _lag_unknown(status: FetchStatus, error: str, metrics: Metrics, label: str) -> None:
    """A pull failed: until one is answered the lag is not known. The last measured lag
    would be a lie (a partition froze it at "caught up", 0, while logs piled up: on-call
    audit), so the status says "not caught up, lag unknown" and the lag gauges are NaN: a
    graph shows a gap, and a comparison with them is false for as long."""
    status.pull_error = error[:300]
    status.caught_up = False
    status.lag_log_groups = status.lag_seconds = status.cursor_time = None
    for gauge in (metrics.lag_log_groups, metrics.lag_logs, metrics.lag_seconds):
        gauge.labels(label).set(math.nan)


async def probe_lag(
    client: SlsClient,
    logstore: str,
    shard: int,
    cursor: str,
    status: FetchStatus,
    metrics: Metrics,
) -> None:
    """Lag behind the end cursor. SLS cursors count log groups, so their difference is the
    backlog in groups; its age is the receive time at our position."""
    label = str(shard)
    try:
        end = await client.get_cursor(logstore, shard, "end")
        groups = max(0, cursors.decode(end) - cursors.decode(cursor))
    except (E.SlsError, cursors.InvalidCursorString):
        return
    status.lag_log_groups = groups
    metrics.lag_log_groups.labels(label).set(groups)
    metrics.lag_logs.labels(label).set(groups * status.logs_per_group)
    if groups == 0:
        status.lag_seconds, status.cursor_time = 0.0, None
    else:
        try:
            at = await client.cursor_time(logstore, shard, cursor)
        except E.SlsError:
            return
        status.lag_seconds, status.cursor_time = max(0.0, time.time() - at), float(at)
    metrics.lag_seconds.labels(label).set(status.lag_seconds or 0.0)
