"""Bounded runs (`consumer.end`): the window [start, end) in one place.

A bounded run reads each shard up to the cursor of `consumer.end`, commits it, and stops once
every shard of the group (within `consumer.shards`) has a checkpoint there — the shards may
be spread over several daemons, each of which sees the same checkpoints. The pieces:

- `end_cursor`: a shard's window end as a cursor, once the end time has surely passed (the
  fetcher pulls with it as `end_cursor` and reports `EndOfWindow` on reaching it; the shard
  task then commits and idles);
- `reached`: whether a position is at or past the end (an older checkpoint past it counts:
  the window is never read backwards);
- `watch_group`: polls the group's checkpoints until every shard has reached its end, then
  the source shuts down as the daemon's shutdown does (exit 0 once all sources are done).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping

import anyio
import structlog

from loghubd.protocol import cursor as cursors
from loghubd.protocol import errors as E
from loghubd.sls import SlsClient

log = structlog.get_logger("loghubd.window")

# Within this many seconds of `consumer.end` nothing is pulled until the end is this long
# past; then it is resolved to a cursor. Covers clock skew between us and the service, and
# logs received just before the end but stored a moment later.
WINDOW_SETTLE_S = 1.0


def reached(cursor: str, end: str) -> bool:
    """Whether `cursor` is at or past `end` (same shard). SLS cursors are base64 decimal
    positions (PROTOCOL.md §7); an undecodable one only counts when it is equal."""
    if cursor == end:
        return True
    try:
        return cursors.decode(cursor) >= cursors.decode(end)
    except cursors.InvalidCursorString:
        return False


async def end_cursor(
    client: SlsClient, logstore: str, shard: int, end: float, bind: Mapping[str, object]
) -> str | None:
    """The cursor of `end`, or None while that time is still well ahead: the window is
    still being written, and everything stored so far is inside it, so pulls need no bound.
    Close to the end nothing is pulled until it has surely passed (by `WINDOW_SETTLE_S`),
    then the cursor is looked up. SLS looks times up to the second: the window is
    [start, end) in whole seconds, like `consumer.start`."""
    now = time.time()
    if now < end - WINDOW_SETTLE_S:
        return None
    await anyio.sleep(max(0.0, end + WINDOW_SETTLE_S - now))
    cursor = await client.get_cursor(logstore, shard, str(int(end)))
    log.info("shard_window_end_resolved", **bind, end=end, cursor=cursor)
    return cursor


async def watch_group(
    client: SlsClient,
    *,
    logstore: str,
    group: str,
    end: float,
    shards: tuple[int, ...] | None,
    every: float,
    sleep: Callable[[float], Awaitable[None]],
    done: anyio.Event,
    bind: Mapping[str, object],
    blocked: Callable[[], list[int]] = lambda: [],
    give_up: Callable[[list[int]], None] = lambda shards: None,
    tally: Callable[[], dict[str, int]] = dict,
) -> None:
    """Set `done` once every shard of the group (within `shards`) has a checkpoint at or past
    the cursor of `end`, whoever consumed it. Checks every `every` seconds, sooner when
    `sleep` (a shard finished its window) returns early. Also once every shard this daemon
    holds has either reached its end or failed for good (`blocked`: the failed ones): the
    window cannot complete, and a job run from cron must not wait for ever; `give_up` is told
    which shards, then `done` is set."""
    ends: dict[int, str] = {}  # shard → the window's end cursor (stable once resolved)
    while True:
        await sleep(every)
        failed = blocked()
        if failed:
            log.error(
                "window_cannot_complete",
                **bind,
                end=end,
                failed_shards=failed,
                hint="these shards' processor failed for good (shard_parked says why): fix "
                "it and run again with the same group, which starts where this run ended",
            )
            give_up(failed)
            done.set()
            return
        if time.time() < end + WINDOW_SETTLE_S:
            continue
        try:
            pending = await _pending(client, logstore, group, end, shards, ends)
        except E.SlsError as exc:
            log.warning("window_check_failed", **bind, error=str(exc)[:300])
            continue
        if not pending:
            counts = tally()
            log.info("window_complete", **bind, end=end, shards=sorted(ends), **counts)
            if counts and counts["logs"] == 0:
                log.warning(
                    "window_delivered_nothing",
                    **bind,
                    end=end,
                    **counts,
                    hint="this daemon delivered no log of the window: it holds none, or the "
                    "query matched none, or the group's checkpoints were at its end already "
                    "(a group used before: use a fresh one, or `loghubd group reset`)",
                )
            done.set()
            return


async def _pending(
    client: SlsClient,
    logstore: str,
    group: str,
    end: float,
    allowed: tuple[int, ...] | None,
    ends: dict[int, str],
) -> list[int]:
    shards = [int(s["shardID"]) for s in await client.list_shards(logstore)]
    if allowed is not None:
        shards = [s for s in shards if s in allowed]
    checkpoints = {
        int(cp["shard"]): str(cp.get("checkpoint") or "")
        for cp in await client.checkpoints(logstore, group)
    }
    pending = []
    for shard in shards:
        checkpoint = checkpoints.get(shard, "")
        if not checkpoint:
            pending.append(shard)
            continue
        if shard not in ends:
            ends[shard] = await client.get_cursor(logstore, shard, str(int(end)))
        if not reached(checkpoint, ends[shard]):
            pending.append(shard)
    return pending
