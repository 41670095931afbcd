"""CheckpointTracker: the committable cursor of one shard, from the batches fetched and finished.

Pure: no I/O, no clock, no logging. The fetcher, the processing step and the periodic commit
drive it; the processor sees it through the SDK-shaped `save_checkpoint` / `get_checkpoint`.

Cursors are opaque strings, so the tracker never compares them. What it knows is the order in
which batches were fetched: each `fetched(start, next)` appends a batch to a queue, and the
queue is the order of the stream.

Invariants (the Kafka reliable-consumer lesson: a crash re-delivers, it never skips):

1. The pending batches tile the stream: the first one starts at `committable()`, each next one
   starts where the previous one ended, and the last one ends at `fetch_cursor`. `fetched`
   refuses a batch that does not start at `fetch_cursor`.
2. The first pending batch is never done: a done prefix is folded into the base cursor at
   once. Hence `committable()` is the start of the earliest unfinished batch, or the end of the
   last fetched batch when all are done. It never passes an unfinished batch.
3. `committable()` only moves forward, except through `rollback`, which is the processor's
   explicit request to re-read.
4. A deferred batch (`defer`) is finished by its own `done` only: `save_checkpoint` on a later
   batch does not cover it, so a processor that mixes the two never moves the checkpoint past
   rows it has not written yet.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BatchToken:
    """One fetched batch: read from `start_cursor`, followed by `next_cursor`.

    `seq` is unique per tracker and increases in fetch order; it is what identifies the batch
    (two batches may share cursors, e.g. two empty pulls at the end of a shard).
    """

    seq: int
    start_cursor: str
    next_cursor: str


class CheckpointTracker:
    """Tracks one shard's fetched and finished batches; see the module docstring.

    :param initial: the cursor the shard task starts from (the server's checkpoint, or the
        configured start position resolved to a cursor).
    :param committed: what the server already holds; `None` when it has no checkpoint yet, so
        the first flush records the start position (and, for an empty read-only shard, its end).
    """

    def __init__(self, initial: str, *, committed: str | None = None) -> None:
        # Everything before `_base` is finished; `_pending` starts at `_base` (invariant 1).
        self._base = initial
        self._pending: dict[int, BatchToken] = {}  # seq → token, in fetch order
        self._done: set[int] = set()  # seqs in `_pending` that are finished
        self._deferred: set[int] = set()  # seqs in `_pending` that only `done` finishes
        self._tail = initial  # where the next fetch reads from
        self._next_seq = 0
        self._committed = committed
        self._current: BatchToken | None = None
        self._commit_requested = False

    # -- fetcher side -------------------------------------------------------------------------

    @property
    def fetch_cursor(self) -> str:
        """Where the next batch must be read from (moved by `fetched` and `rollback`)."""
        return self._tail

    def fetched(self, start_cursor: str, next_cursor: str) -> BatchToken:
        """Record a batch read from `start_cursor`, in fetch order; returns its token."""
        if start_cursor != self._tail:
            # A gap or an overlap would let committable() jump over data nobody processed.
            raise ValueError(
                f"batch starts at {start_cursor!r} but the next fetch position is {self._tail!r}"
            )
        token = BatchToken(self._next_seq, start_cursor, next_cursor)
        self._next_seq += 1
        self._pending[token.seq] = token
        self._tail = next_cursor
        return token

    def rollback(self, cursor: str) -> None:
        """Re-read from `cursor`: forget the batches from there on; fetching resumes at `cursor`.

        If `cursor` is where a pending batch starts (the earliest such batch, when several do),
        that batch and every later one are forgotten, done or not: they will be fetched again,
        and the earlier pending batches keep their state. If `cursor` is the fetch position,
        nothing changes. Any other cursor (one before the committable position, or a fresh
        start position after InvalidCursor) cannot be placed in the queue: everything is
        forgotten and `cursor` becomes the committable position, possibly moving it backwards.
        """
        if cursor == self._tail:
            return
        seqs = list(self._pending)
        starts = [self._pending[seq].start_cursor for seq in seqs]
        if cursor in starts:
            seqs_to_drop = seqs[starts.index(cursor) :]
        else:
            seqs_to_drop = seqs
            self._base = cursor
        for seq in seqs_to_drop:
            del self._pending[seq]
            self._done.discard(seq)
            self._deferred.discard(seq)
        if self._current is not None and self._current.seq not in self._pending:
            self._current = None
        self._tail = cursor

    # -- processor side -----------------------------------------------------------------------

    def done(self, token: BatchToken) -> None:
        """Mark one batch finished; batches may finish in any order.

        A token forgotten by `rollback` (or already folded into the base) is ignored: the batch
        will be, or was, accounted for by its re-fetch.
        """
        if token.seq >= self._next_seq:
            raise ValueError(f"batch {token.seq} was never fetched by this tracker")
        pending = self._pending.get(token.seq)
        if pending is None:
            return
        if pending != token:
            raise ValueError(f"batch {token.seq} is not this tracker's {pending!r}")
        self._done.add(token.seq)
        self._advance()

    def defer(self) -> BatchToken | None:
        """The processor will finish the current batch later, through `done` (its `Ack`):
        `save_checkpoint` on a later batch no longer covers it (invariant 4)."""
        current = self._current
        if current is not None and current.seq in self._pending:
            self._deferred.add(current.seq)
        return current

    def begin(self, token: BatchToken) -> None:
        """The shard task hands `token` to the processor: the batch `save_checkpoint` covers."""
        self._current = token

    def left_unfinished(self, token: BatchToken) -> None:
        """The processor will not finish `token` (the shard stops with it in hand: a stop cut
        its retries short, the failure policy stopped the shard, or the shutdown grace ran
        out). It stays pending, so `committable()` cannot pass it and the next owner reads it;
        `save_checkpoint` no longer covers it. The current batch becomes the last one handed
        over before it, so a processor that buffers batches and saves in its `shutdown` still
        finishes those, and only those."""
        if self._current is None or self._current.seq < token.seq:
            return
        earlier = [seq for seq in self._pending if seq < token.seq]
        self._current = self._pending[earlier[-1]] if earlier else None

    @property
    def current(self) -> BatchToken | None:
        """The batch handed to the processor by the last `begin` (None after a rollback)."""
        return self._current

    def save_checkpoint(self, persist: bool = True) -> None:
        """The processor has finished everything up to and including the current batch.

        Like the SDK's `saveCheckPoint`, this covers the earlier batches too: a processor that
        buffers several batches and saves once at flush time must not leave the checkpoint stuck
        at the first batch it did not save. Earlier batches it deferred are not covered: their
        `Ack` finishes them (invariant 4). Prefetched batches after the current one are not
        covered. `persist=True` asks the I/O layer to commit now (`take_commit_request`);
        `False` leaves it to the periodic commit (`checkpoint_interval`).
        """
        current = self._current
        if current is not None:
            for seq in self._pending:
                if seq > current.seq:
                    break
                if seq == current.seq or seq not in self._deferred:
                    self._done.add(seq)
            self._advance()
        if persist:
            self._commit_requested = True

    def get_checkpoint(self) -> str:
        """The SDK's `getCheckpoint`: the committable cursor (a processor may roll back to it)."""
        return self._base

    # -- commit side --------------------------------------------------------------------------

    def committable(self) -> str:
        """The lowest position not yet finished (invariant 2)."""
        return self._base

    @property
    def committed(self) -> str | None:
        """What the server holds, as last recorded by `set_committed`."""
        return self._committed

    def set_committed(self, cursor: str) -> None:
        """Record that the server now holds `cursor` (after a successful commit)."""
        self._committed = cursor

    def needs_commit(self) -> bool:
        return self._base != self._committed

    @property
    def commit_requested(self) -> bool:
        return self._commit_requested

    def request_commit(self) -> None:
        """Ask the I/O layer to commit now (without marking anything done)."""
        self._commit_requested = True

    def take_commit_request(self) -> bool:
        """Whether a processor asked for an immediate commit since the last call; clears it."""
        requested, self._commit_requested = self._commit_requested, False
        return requested

    @property
    def in_flight(self) -> int:
        """How many fetched batches are not yet folded into the committable position."""
        return len(self._pending)

    def _advance(self) -> None:
        # Fold the done prefix into the base (invariant 2); stops at the first unfinished batch.
        while self._pending:
            seq = next(iter(self._pending))
            if seq not in self._done:
                break
            self._base = self._pending.pop(seq).next_cursor
            self._done.remove(seq)
            self._deferred.discard(seq)
