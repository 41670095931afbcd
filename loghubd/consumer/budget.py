"""`ByteBudget`: the fetched-but-unfinished bytes of all shards of a source, bounded.

Memory is bounded by bytes, not batch counts. The one place where bytes are counted in and
out: `hand_over` counts a pulled batch in and passes it to its shard task (giving it back if
that fails), `handled` gives it back once the shard task is done with it (processed, dead-
lettered, dropped on a rollback or a stop). A fetcher waits in `wait_for_room` before pulling
while the budget is spent; a single batch larger than the whole budget still passes when
nothing else is in flight, so progress is never blocked.
"""

from __future__ import annotations

from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectSendStream

from loghubd.models import Batch
from loghubd.ops.metrics import Metrics


class ByteBudget:
    def __init__(self, limit: int, metrics: Metrics) -> None:
        self.limit = limit
        self.used = 0
        self._metrics = metrics
        self._freed = anyio.Event()

    async def wait_for_room(self) -> None:
        while self.used >= self.limit:
            freed = self._freed
            await freed.wait()

    async def hand_over(self, batch: Batch, send: MemoryObjectSendStream[Any]) -> None:
        """Count `batch` in and send it; the receiver calls `handled(batch)` when done."""
        self._add(len(batch.raw))
        try:
            await send.send(batch)
        except BaseException:
            self.handled(batch)
            raise

    def handled(self, batch: Batch) -> None:
        """`batch` (counted in by `hand_over`) is finished with: its bytes are free again."""
        self._add(-len(batch.raw))
        self._freed.set()
        self._freed = anyio.Event()

    def _add(self, n: int) -> None:
        self.used += n
        self._metrics.bytes_in_flight.set(self.used)
