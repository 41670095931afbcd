"""Reading the source directly (not through the consumer group): exact ranges for recovery,
and the group's committed checkpoints for housekeeping.

These run at start-up and, rarely, when adopting a crashed writer's entry; they use a private
event loop on the calling thread (a worker thread, never the daemon's loop).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import aiohttp

from loghubd.consumer.client import SlsClient
from loghubd.plugins.api import ProcessorContext
from loghubd_spark.arrow import position
from loghubd_spark.wal import Range

PULL_GROUPS = 1000


class SourceError(RuntimeError):
    pass


@dataclass(frozen=True, slots=True)
class Piece:
    shard: int
    cursor: str
    next_cursor: str
    raw: bytes


def _client(session: aiohttp.ClientSession, ctx: ProcessorContext) -> SlsClient:
    return SlsClient(
        session,
        ctx.endpoint,
        ctx.project,
        ctx.credentials,
        auth_version=ctx.auth_version,
        region=ctx.region,
        request_timeout=30.0,
        user_agent=f"loghubd-spark/0.1-recovery-{ctx.group}-{ctx.consumer}",
    )


async def _pull(ctx: ProcessorContext, ranges: Sequence[Range]) -> list[Piece]:
    out: list[Piece] = []
    async with aiohttp.ClientSession() as session:
        client = _client(session, ctx)
        for r in ranges:
            at = r.start
            while at != r.end:
                pulled = await client.pull(ctx.logstore, r.shard, at, PULL_GROUPS, end_cursor=r.end)
                if pulled.next_cursor == at:
                    raise SourceError(
                        f"shard {r.shard}: no data between {r.start} and {r.end} any more"
                    )
                out.append(Piece(r.shard, at, pulled.next_cursor, pulled.data))
                at = pulled.next_cursor
    return out


def pull_ranges(ctx: ProcessorContext, ranges: Sequence[Range]) -> list[Piece]:
    """Exactly the log groups of `ranges`, in order (several pulls per range if needed)."""
    return asyncio.run(_pull(ctx, ranges))


async def _checkpoints(ctx: ProcessorContext) -> dict[int, int]:
    async with aiohttp.ClientSession() as session:
        rows = await _client(session, ctx).checkpoints(ctx.logstore, ctx.group)
    out: dict[int, int] = {}
    for row in rows:
        pos = position(str(row.get("checkpoint") or ""))
        shard = row.get("shard")
        if isinstance(shard, int) and pos is not None:
            out[shard] = pos
    return out


def committed_checkpoints(ctx: ProcessorContext) -> dict[int, int]:
    """The group's committed checkpoint per shard, as positions."""
    return asyncio.run(_checkpoints(ctx))
