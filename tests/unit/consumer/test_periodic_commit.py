"""The supervisor's periodic commit: a shard whose sink is stuck in `flush` holds back its own
checkpoint, never another shard's, and its stuck commit is not started again and again."""

from __future__ import annotations

import dataclasses
import threading

import anyio

from loghubd.consumer.assignment import Assignment
from loghubd.consumer.supervisor import Supervisor, Waker
from loghubd.ops.metrics import Metrics
from loghubd.plugins.loaded import load_factory
from tests.unit.consumer.scripted import ScriptedClient, at
from tests.unit.consumer.test_shard_task import Recorder, context, until


class StuckFlush(Recorder):
    """Saves without persisting; its `flush` blocks until `release` is set."""

    def __init__(self) -> None:
        super().__init__(persist=False)
        self.release = threading.Event()
        self.flushes = 0

    def flush(self) -> None:
        self.flushes += 1
        self.release.wait(30)


def test_a_stuck_flush_holds_back_only_its_own_shard() -> None:
    client = ScriptedClient(shard_data={0: 3, 1: 3, 2: 3})
    stuck = StuckFlush()
    processors = {0: stuck, 1: Recorder(persist=False), 2: Recorder(persist=False)}
    ctx = dataclasses.replace(
        context(client, stuck),
        factory=load_factory("per-shard", lambda shard: processors[shard]),
        checkpoint_interval=0.02,
    )
    assignment = Assignment()
    supervisor = Supervisor(ctx, assignment, Metrics(), Waker())

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            await tg.start(supervisor.run)
            supervisor.apply(assignment.apply_answer([0, 1, 2]))
            try:
                # Shards 1 and 2 are committed by the timer while shard 0's flush hangs.
                await until(lambda: client.saved.get(1) == at(3), "shard 1's commit")
                await until(lambda: client.saved.get(2) == at(3), "shard 2's commit")
                await until(lambda: stuck.flushes == 1, "shard 0's flush")
                await anyio.sleep(0.2)  # ten more intervals
                assert 0 not in client.saved
                assert stuck.flushes == 1, "a commit still running was started again"
            finally:
                stuck.release.set()
            await until(lambda: client.saved.get(0) == at(3), "shard 0's commit")
            tg.cancel_scope.cancel()

    anyio.run(main)
