"""`ByteBudget`: the fetched-but-unfinished bytes of all shards of a source, bounded.

Memory is bounded by bytes, not batch counts, and the room is taken *before* a pull is sent
(the pure accounting, and its invariants, are `loghubd.consumer.inflight.InFlightBytes`):

- `reserve` waits until the shard's next pull fits and returns a `Grant`: how many log groups
  the pull may ask for (fewer when little is left; at least one when nothing else is in
  flight, so progress is never blocked), their estimated bytes reserved;
- `hand_over` replaces the reservation by the pulled batch's real bytes and passes the batch
  to its shard task (giving them back if that fails); `cancel` gives a reservation back when
  the pull failed or brought nothing to process;
- `handled` gives a batch's bytes back once the shard task is done with it (processed,
  dead-lettered, dropped on a rollback or a stop).
"""

from __future__ import annotations

from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectSendStream

from loghubd.consumer.inflight import Grant, InFlightBytes
from loghubd.models import Batch
from loghubd.ops.metrics import Metrics


class ByteBudget:
    def __init__(self, limit: int, metrics: Metrics) -> None:
        self._bytes = InFlightBytes(limit)
        self._metrics = metrics
        self._freed = anyio.Event()

    @property
    def limit(self) -> int:
        return self._bytes.limit

    @property
    def used(self) -> int:
        """Bytes reserved for pulls in flight plus bytes of unfinished batches."""
        return self._bytes.held

    async def reserve(self, shard: int, max_groups: int) -> Grant:
        """Room for `shard`'s next pull of at most `max_groups` log groups (waits for it)."""
        while (grant := self._bytes.grant(shard, max_groups)) is None:
            freed = self._freed
            await freed.wait()
        self._metrics.bytes_in_flight.set(self._bytes.held)
        return grant

    def cancel(self, grant: Grant, groups: int = 0) -> None:
        """The pull of `grant` failed, or brought nothing to process (`groups`: the log
        groups it used of its count, e.g. all filtered out by a query): give its room back."""
        self._bytes.settle(grant, groups, 0)
        self._changed()

    async def hand_over(
        self,
        grant: Grant,
        groups: int,
        batch: Batch,
        send: MemoryObjectSendStream[Any],
        *,
        capped: bool = False,
    ) -> None:
        """`batch` came from the pull of `grant` (`groups`: the log groups that pull used of
        its count; `capped`: the service cut the answer by size): count its bytes in instead
        of the reservation and send it; the receiver calls `handled(batch)` when done."""
        self._bytes.settle(grant, groups, len(batch.raw), capped=capped)
        self._changed()
        try:
            await send.send(batch)
        except BaseException:
            self.handled(batch)
            raise

    def handled(self, batch: Batch) -> None:
        """`batch` (counted in by `hand_over`) is finished with: its bytes are free again."""
        self._bytes.release(len(batch.raw))
        self._changed()

    def _changed(self) -> None:
        self._metrics.bytes_in_flight.set(self._bytes.held)
        self._freed.set()
        self._freed = anyio.Event()
