"""The supervisor's periodic commit: a shard whose sink is stuck in `flush` holds back its own
checkpoint, never another shard's, its stuck commit is not started again and again, and it is
logged once as slow (then as ended)."""

from __future__ import annotations

import dataclasses
import threading

import anyio
import pytest
import structlog

from loghubd.consumer import supervisor as supervisor_mod
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


def test_a_stuck_flush_holds_back_only_its_own_shard(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(supervisor_mod, "SLOW_COMMIT_S", 0.1)
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

    def logged(event: str) -> list[dict[str, object]]:
        return [e for e in logs if e["event"] == event]

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            await tg.start(supervisor.run)
            supervisor.apply(assignment.apply_answer([0, 1, 2]))
            try:
                # Shards 1 and 2 are committed by the timer while shard 0's flush hangs.
                await until(lambda: client.saved.get(1) == at(3), "shard 1's commit")
                await until(lambda: client.saved.get(2) == at(3), "shard 2's commit")
                await until(lambda: stuck.flushes == 1, "shard 0's flush")
                await until(lambda: logged("checkpoint_commit_slow"), "the slow-commit warning")
                await anyio.sleep(0.1)  # five more intervals
                # Shard 0 may have committed its start before its processor started (a
                # loaded machine: the timer fires first, with nothing to flush); never more.
                assert client.saved.get(0) in (None, at(0)), client.saved
                assert stuck.flushes == 1, "a commit still running was started again"
            finally:
                stuck.release.set()
            await until(lambda: client.saved.get(0) == at(3), "shard 0's commit")
            await until(lambda: logged("checkpoint_commit_slow_ended"), "the end of it logged")
            tg.cancel_scope.cancel()

    with structlog.testing.capture_logs() as logs:
        anyio.run(main)
    slow = [e for e in logs if e["event"].startswith("checkpoint_commit_slow")]
    assert [(e["event"], e["shard"]) for e in slow] == [
        ("checkpoint_commit_slow", 0),
        ("checkpoint_commit_slow_ended", 0),
    ], slow
    assert slow[0]["running_s"] >= 0.1
