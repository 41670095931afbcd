"""The checkpoint tracker as the daemon and processors share it, across threads.

`CheckpointTracker` is pure and single-threaded. Sync processors call it from worker threads
(and a micro-batching processor acks from its own thread) while the event loop fetches,
commits and rolls back; `ShardTracker` serialises every access with one lock.
"""

from __future__ import annotations

import threading

from loghubd.consumer.checkpoint import BatchToken, CheckpointTracker


class Ack:
    """Marks exactly one batch finished, later and from any thread (see `defer`)."""

    def __init__(self, tracker: ShardTracker, token: BatchToken | None) -> None:
        self._tracker = tracker
        self._token = token

    def done(self, persist: bool = False) -> None:
        if self._token is not None:
            self._tracker.done(self._token, persist=persist)


class ShardTracker:
    """Thread-safe facade; what `processor.process(batch, tracker)` receives."""

    def __init__(self, initial: str, *, committed: str | None = None) -> None:
        self._t = CheckpointTracker(initial, committed=committed)
        self._lock = threading.Lock()

    # -- the processor's API (the SDK's tracker shape, plus `defer`) ----------------------------

    def save_checkpoint(self, persist: bool = True) -> None:
        with self._lock:
            self._t.save_checkpoint(persist)

    def get_checkpoint(self) -> str:
        with self._lock:
            return self._t.get_checkpoint()

    def defer(self) -> Ack:
        """A handle that finishes the current batch later, when `Ack.done()` is called.

        For processors that buffer across batches (and shards) and write later: the batch
        counts as unfinished, so the checkpoint cannot pass it, until its data is written."""
        with self._lock:
            return Ack(self, self._t.current)

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
