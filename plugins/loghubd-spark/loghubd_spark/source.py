"""Reading the source directly (not through the consumer group): exact ranges, cursors, shards
and forced checkpoints, from synchronous code.

Users: the processor at start-up and, rarely, when adopting a crashed writer's entry (a worker
thread, never the daemon's loop), and the Structured Streaming source (`stream.py`): its
offsets on the driver, its exact-range reads in executors' Python workers. All of them drive
loghubd's one SLS client (`SlsClient`, async) through `SyncSls`: a private event loop and HTTP
session owned by the calling thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TypeVar

import aiohttp

from loghubd import CredentialsSource, ProcessorContext, Pulled, SlsClient
from loghubd.arrow import position
from loghubd.protocol import errors as E
from loghubd.wal import Range

PULL_GROUPS = 1000  # log groups per PullLogs, the service's maximum
REQUEST_TIMEOUT = 30.0

T = TypeVar("T")


class SourceError(RuntimeError):
    pass


@dataclass(frozen=True, slots=True)
class Piece:
    shard: int
    cursor: str
    next_cursor: str
    raw: bytes


class SyncSls:
    """`SlsClient` from synchronous code: every call runs to completion on a private event
    loop, with one HTTP session kept across calls. Not thread-safe: one per thread. Close it
    (or use it as a context manager)."""

    def __init__(
        self,
        endpoint: str,
        project: str,
        credentials: CredentialsSource,
        *,
        auth_version: str = "v1",
        region: str = "",
        user_agent: str = "loghubd-spark/0.1",
        request_timeout: float = REQUEST_TIMEOUT,
    ) -> None:
        self._args = (endpoint, project, credentials)
        self._kwargs = {"auth_version": auth_version, "region": region, "user_agent": user_agent}
        self._timeout = request_timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session: aiohttp.ClientSession | None = None
        self._client: SlsClient | None = None

    @classmethod
    def from_context(cls, ctx: ProcessorContext, purpose: str) -> SyncSls:
        return cls(
            ctx.endpoint,
            ctx.project,
            ctx.credentials,
            auth_version=ctx.auth_version,
            region=ctx.region,
            user_agent=f"loghubd-spark/0.1-{purpose}-{ctx.group}-{ctx.consumer}",
        )

    def call(self, fn: Callable[[SlsClient], Awaitable[T]]) -> T:
        """`await fn(client)`, on this object's loop."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(self._call(fn))

    async def _call(self, fn: Callable[[SlsClient], Awaitable[T]]) -> T:
        if self._client is None:
            self._session = aiohttp.ClientSession()
            endpoint, project, credentials = self._args
            self._client = SlsClient(
                self._session,
                endpoint,
                project,
                credentials,
                auth_version=self._kwargs["auth_version"],
                region=self._kwargs["region"],
                user_agent=self._kwargs["user_agent"],
                request_timeout=self._timeout,
            )
        return await fn(self._client)

    def close(self) -> None:
        loop, self._loop = self._loop, None
        if loop is None:
            return
        try:
            if self._session is not None:
                loop.run_until_complete(self._session.close())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            self._session = self._client = None
            loop.close()

    def __enter__(self) -> SyncSls:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- reads ---------------------------------------------------------------------------------

    def pull(self, logstore: str, shard: int, cursor: str, groups: int, end: str) -> Pulled:
        return self.call(lambda c: c.pull(logstore, shard, cursor, groups, end_cursor=end))

    def pieces(self, logstore: str, r: Range, groups: int = PULL_GROUPS) -> Iterator[Piece]:
        """Exactly the log groups of `r`, pull after pull (each pull is one Piece), lazily."""
        a, b = position(r.start), position(r.end)
        if a is not None and b is not None and a > b:
            raise SourceError(
                f"shard {r.shard}: inconsistent range: it starts at position {a}, after its "
                f"end {b} ({r.start} > {r.end})"
            )
        at = r.start
        while at != r.end:
            pulled = self.pull(logstore, r.shard, at, groups, r.end)
            if pulled.next_cursor == at:
                raise SourceError(
                    f"shard {r.shard}: no data between {r.start} and {r.end} any more"
                )
            yield Piece(r.shard, at, pulled.next_cursor, pulled.data)
            at = pulled.next_cursor


def retained_from(sls: SyncSls, logstore: str, shard: int, at: str, end: str) -> str | None:
    """Where reading [`at`, `end`) of `shard` can go on after the service refused cursor `at`
    (InvalidCursor): the oldest retained log group's cursor, or `end` when everything before
    `end` expired. None when `at` is not older than the retained data: not an expiry (a
    foreign or malformed cursor), which no reader may skip."""
    begin = sls.call(lambda c: c.get_cursor(logstore, shard, "begin"))
    a, b, e = position(at), position(begin), position(end)
    if a is None or b is None or e is None or b <= a:
        return None
    return end if b >= e else begin


@dataclass(frozen=True, slots=True)
class Retained:
    """What the service still keeps of some ranges: the pieces, in order, and the parts of
    the ranges that expired (past the logstore's TTL) before they were read."""

    pieces: list[Piece]
    lost: list[Range]


def pull_retained(ctx: ProcessorContext, ranges: Sequence[Range]) -> Retained:
    """Exactly the log groups of `ranges`, in order (several pulls per range if needed),
    skipping what expired; any other refusal is raised."""
    pieces: list[Piece] = []
    lost: list[Range] = []
    with SyncSls.from_context(ctx, "recovery") as sls:
        for r in ranges:
            at = r.start
            while at != r.end:
                try:
                    for piece in sls.pieces(ctx.logstore, Range(r.shard, at, r.end)):
                        pieces.append(piece)
                        at = piece.next_cursor
                except E.InvalidCursor:
                    resume = retained_from(sls, ctx.logstore, r.shard, at, r.end)
                    if resume is None:
                        raise
                    lost.append(Range(r.shard, at, resume))
                    at = resume
    return Retained(pieces, lost)


def committed_checkpoints(ctx: ProcessorContext) -> dict[int, int]:
    """The group's committed checkpoint per shard, as positions."""
    with SyncSls.from_context(ctx, "recovery") as sls:
        rows = sls.call(lambda c: c.checkpoints(ctx.logstore, ctx.group))
    out: dict[int, int] = {}
    for row in rows:
        pos = position(str(row.get("checkpoint") or ""))
        shard = row.get("shard")
        if isinstance(shard, int) and pos is not None:
            out[shard] = pos
    return out
