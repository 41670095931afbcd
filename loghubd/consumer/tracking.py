"""The checkpoint tracker as the daemon and processors share it, across threads.

`CheckpointTracker` is pure and single-threaded. Sync processors call it from worker threads
(and a micro-batching processor acks from its own thread) while the event loop fetches,
commits and rolls back; `ShardTracker` serialises every access with one lock.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

import anyio

from loghubd.consumer.checkpoint import BatchToken, CheckpointTracker

if TYPE_CHECKING:
    from loghubd.plugins.api import StopSignal


class StopFlag:
    """`Tracker.stopping`: set once, on the event loop, when the shard begins to stop.

    `is_set()` may be asked from any thread (a synchronous processor's retry loop);
    `await wait()` is for the event loop. Unlike `anyio.Event` it can be made outside an event
    loop (a tracker in a unit test)."""

    def __init__(self) -> None:
        self._set = False
        self._event: anyio.Event | None = None

    def set(self) -> None:
        self._set = True
        if self._event is not None:
            self._event.set()

    def is_set(self) -> bool:
        return self._set

    async def wait(self) -> None:
        if self._set:
            return
        if self._event is None:
            self._event = anyio.Event()
        await self._event.wait()


class Ack:
    """Marks exactly one batch finished, later and from any thread (see `defer`)."""

    def __init__(self, tracker: ShardTracker, token: BatchToken | None) -> None:
        self._tracker = tracker
        self._token = token

    def done(self, persist: bool = False) -> None:
        if self._token is not None:
            self._tracker.done(self._token, persist=persist)


_T = TypeVar("_T")


async def until_stopping(
    stopping: StopSignal, call: Callable[[], Awaitable[_T]], *, patience: float = 0.0
) -> tuple[bool, _T | None]:
    """`(True, await call())`, or `(False, None)` if the call has not returned `patience`
    seconds after `stopping` was set (it is cancelled then). With a patience, a call going
    well when the shard begins to stop is let finish, and only one that hangs (a black-holed
    network, a lock held by a stuck peer) is given up. An exception of the call propagates
    as it is."""
    outcome: list[tuple[_T | None, BaseException | None]] = []

    async def run() -> None:
        try:
            outcome.append((await call(), None))
        except Exception as exc:
            outcome.append((None, exc))
        tg.cancel_scope.cancel()

    async def watch() -> None:
        await stopping.wait()
        if patience > 0:
            await anyio.sleep(patience)
        tg.cancel_scope.cancel()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        tg.start_soon(watch)
    if not outcome:
        return False, None
    value, error = outcome[0]
    if error is not None:
        raise error
    return True, value


class ShardTracker:
    """Thread-safe facade; what `processor.process(batch, tracker)` receives."""

    def __init__(
        self,
        initial: str,
        *,
        committed: str | None = None,
        stopping: StopFlag | None = None,
        on_problem: Callable[[str], None] | None = None,
    ) -> None:
        self._t = CheckpointTracker(initial, committed=committed)
        self._lock = threading.Lock()
        self.stopping = StopFlag() if stopping is None else stopping
        self._on_problem = on_problem

    # -- the processor's API (the SDK's tracker shape, plus `defer` and `stopping`) -------------

    def save_checkpoint(self, persist: bool = True) -> None:
        with self._lock:
            self._t.save_checkpoint(persist)

    def get_checkpoint(self) -> str:
        with self._lock:
            return self._t.get_checkpoint()

    def defer(self) -> Ack:
        """A handle that finishes the current batch later, when `Ack.done()` is called.

        For processors that buffer across batches (and shards) and write later: the batch
        counts as unfinished, so the checkpoint cannot pass it, until its data is written,
        even if `save_checkpoint` is called on a later batch meanwhile."""
        with self._lock:
            return Ack(self, self._t.defer())

    def note_problem(self, reason: str) -> None:
        """Why the batch in hand is not done yet (the processor retries it itself)."""
        if self._on_problem is not None:
            self._on_problem(reason[:300])

    # -- the daemon's side ------------------------------------------------------------------

    @property
    def fetch_cursor(self) -> str:
        with self._lock:
            return self._t.fetch_cursor

    @property
    def committed(self) -> str | None:
        with self._lock:
            return self._t.committed

    def fetched(self, start_cursor: str, next_cursor: str) -> BatchToken:
        with self._lock:
            return self._t.fetched(start_cursor, next_cursor)

    def begin(self, token: BatchToken) -> None:
        with self._lock:
            self._t.begin(token)

    def done(self, token: BatchToken, *, persist: bool = False) -> None:
        with self._lock:
            self._t.done(token)
            if persist:
                self._t.request_commit()

    def rollback(self, cursor: str) -> None:
        with self._lock:
            self._t.rollback(cursor)

    def left_unfinished(self, token: BatchToken) -> None:
        with self._lock:
            self._t.left_unfinished(token)

    def committable(self) -> str:
        with self._lock:
            return self._t.committable()

    def needs_commit(self) -> bool:
        with self._lock:
            return self._t.needs_commit()

    def set_committed(self, cursor: str) -> None:
        with self._lock:
            self._t.set_committed(cursor)

    def take_commit_request(self) -> bool:
        with self._lock:
            return self._t.take_commit_request()
