"""The checkpoint flusher: every `checkpoint_interval`, commit each shard's lowest unfinished
position (processors that saved with `persist=False` rely on it)."""

from __future__ import annotations

import anyio

from loghubd.consumer.supervisor import Supervisor
from loghubd.ops.metrics import Metrics


async def run_flusher(supervisor: Supervisor, interval: float, metrics: Metrics) -> None:
    while True:
        await anyio.sleep(interval)
        for task in supervisor.all_tasks():
            await task.commit()
