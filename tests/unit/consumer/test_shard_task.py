"""A shard task's state changes, driven by a scripted client (`scripted.ScriptedClient`):
start position, consuming, commits, the end of a read-only shard, ownership lost, a failing
processor under the `stop` policy, a failed commit, and what its snapshot says."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
import structlog

from loghubd import Batch, Tracker
from loghubd.backoff import Backoff
from loghubd.consumer.budget import ByteBudget
from loghubd.consumer.fetcher import FetchSettings, ShardCatalog
from loghubd.consumer.processing import RetryPolicy
from loghubd.consumer.shard import ShardContext, ShardTask
from loghubd.ops.metrics import Metrics
from loghubd.plugins.loaded import load_factory
from loghubd.protocol import cursor as cursors
from loghubd.protocol import errors as E
from loghubd.sls import Pulled
from tests.unit.consumer.scripted import ScriptedClient, at, log_groups

QUICK = Backoff(initial=0.01, cap=0.01)


class Recorder:
    """Saves every batch with `persist`; fails the first `failures` attempts."""

    def __init__(self, *, persist: bool = True, failures: int = 0) -> None:
        self.persist = persist
        self.failures = failures
        self.batches: list[tuple[str, str]] = []
        self.events: list[str] = []

    def initialize(self, shard: int) -> None:
        self.events.append(f"initialize {shard}")

    def process(self, batch: Batch, tracker: Tracker) -> None:
        if self.failures:
            self.failures -= 1
            raise RuntimeError("sink down")
        self.batches.append((batch.cursor, batch.next_cursor))
        tracker.save_checkpoint(persist=self.persist)

    def shutdown(self, tracker: Tracker) -> None:
        self.events.append("shutdown")


def context(
    client: ScriptedClient,
    processor: Recorder,
    *,
    retry: RetryPolicy | None = None,
    on_finished: Callable[[], None] = lambda: None,
    max_log_groups: int = 100,
    backoff: Backoff = QUICK,
) -> ShardContext:
    metrics = Metrics()
    return ShardContext(
        client=client,  # type: ignore[arg-type]
        settings=FetchSettings(
            logstore="ls", max_log_groups=max_log_groups, fetch_interval=0.01, backoff=backoff
        ),
        group="g",
        consumer="c",
        start="begin",
        factory=load_factory("recorder", lambda shard: processor),
        retry=retry or RetryPolicy(backoff=QUICK),
        metrics=metrics,
        budget=ByteBudget(1 << 20, metrics),
        catalog=ShardCatalog(client, "ls"),  # type: ignore[arg-type]
        lease_valid=lambda: True,
        on_finished=on_finished,
    )


async def until(condition: Callable[[], bool], what: str) -> None:
    with anyio.fail_after(10):
        while not condition():  # noqa: ASYNC110 - polls state owned by the task
            await anyio.sleep(0.005)


async def run(
    task: ShardTask, body: Callable[[ShardTask], Awaitable[None]]
) -> tuple[list[str], list[ShardTask]]:
    """Run `task`, recording its state changes, while `body` drives it; returns the states
    seen and the tasks `on_exit` got."""
    states: list[str] = []
    exited: list[ShardTask] = []

    async def on_exit(t: ShardTask) -> None:
        exited.append(t)

    async def watch() -> None:
        while True:
            if not states or states[-1] != task.status.state:
                states.append(task.status.state)
            await anyio.sleep(0.001)

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            async with anyio.create_task_group() as inner:
                inner.start_soon(task.run, on_exit)
                await body(task)
            if not states or states[-1] != task.status.state:
                states.append(task.status.state)
            tg.cancel_scope.cancel()
    return states, exited


def test_consumes_commits_and_stops() -> None:
    client, processor = ScriptedClient(shard_data={0: 3}), Recorder()
    task = ShardTask(0, context(client, processor))

    async def body(t: ShardTask) -> None:
        await until(lambda: processor.batches, "a batch")
        await until(lambda: client.saved.get(0) == at(3), "the commit")
        snap = t.snapshot(anyio.current_time(), 0.0)
        assert (snap.state, snap.batches, snap.logs, snap.checkpoint) == (
            "consuming",
            1,
            6,
            at(3),
        )
        assert snap.bytes > 0 and snap.last_error is None and snap.caught_up
        assert t.status.fetch.logs_per_group == pytest.approx(2.0)  # 3 groups of 2 logs
        t.request_stop()

    states, exited = anyio.run(run, task, body)
    assert states == ["starting", "consuming", "stopping"]
    assert processor.batches == [(at(0), at(3))]
    assert processor.events == ["initialize 0", "shutdown"]
    assert client.commits(0) == [at(3)]  # nothing new to commit at the stop
    assert exited == [task]


def test_a_pull_the_service_refuses_fails_the_shard_once_not_in_a_loop() -> None:
    """A pull refused as such (ParameterInvalid: a query the service accepted at start but
    refuses here) is not retried: the shard fails with the reason, and nothing is
    processed or committed past where it started."""
    refusal = E.ParameterInvalid("invalid SPL query: position 4: not supported")
    client, processor = ScriptedClient(shard_data={0: 3}, pull_errors=[refusal]), Recorder()
    task = ShardTask(0, context(client, processor))

    async def body(t: ShardTask) -> None:
        await until(lambda: t.status.state == "failed", "the shard to fail")

    with structlog.testing.capture_logs() as logs:
        states, exited = anyio.run(run, task, body)
    assert states[-1] == "failed" and exited == [task]
    assert [name for name, _ in client.calls].count("pull") == 1
    assert [e["event"] for e in logs].count("pull_refused") == 1
    assert "invalid SPL query" in task.status.reason, task.status.reason
    assert processor.batches == [] and client.commits(0) in ([], [at(0)])


def test_starts_from_the_saved_checkpoint() -> None:
    client, processor = ScriptedClient(shard_data={0: 3}, checkpoints={0: at(2)}), Recorder()
    task = ShardTask(0, context(client, processor))

    async def body(t: ShardTask) -> None:
        await until(lambda: client.saved[0] == at(3), "the commit")
        t.request_stop()

    anyio.run(run, task, body)
    assert processor.batches == [(at(2), at(3))]
    assert ("get_cursor", (0, "begin")) not in client.calls  # the checkpoint wins


def test_a_drained_readonly_shard_commits_its_end_and_finishes() -> None:
    finished: list[int] = []
    client = ScriptedClient(shard_data={0: 2}, readonly=True)
    processor = Recorder(persist=False)  # only the end-of-shard commit commits
    task = ShardTask(0, context(client, processor, on_finished=lambda: finished.append(0)))

    async def body(t: ShardTask) -> None:
        await until(lambda: finished, "on_finished")
        assert t.status.state == "finished" and client.saved[0] == at(2)
        # Let the state sampler (1 ms timer, due before this one) record "finished" before
        # the stop replaces it: without this the two tasks race on a busy machine.
        await anyio.sleep(0.01)
        t.request_stop()

    states, _ = anyio.run(run, task, body)
    assert states == ["starting", "consuming", "finished", "stopping"]


def test_the_end_of_a_readonly_shard_is_sent_even_if_already_committed_and_retried() -> None:
    """The group checkpoint is already at the end (committed before the shard became
    read-only): the end is sent again, because only a commit on a read-only shard ends it on
    the server, and sent again after a failure."""
    finished: list[int] = []
    client = ScriptedClient(
        shard_data={0: 2},
        readonly=True,
        checkpoints={0: at(2)},
        commit_errors=[E.SlsError("busy")],
    )
    task = ShardTask(0, context(client, Recorder(), on_finished=lambda: finished.append(0)))

    async def body(t: ShardTask) -> None:
        await until(lambda: finished, "on_finished")
        t.request_stop()

    anyio.run(run, task, body)
    assert client.commits(0) == [at(2), at(2)]


def test_the_end_of_a_readonly_shard_is_retried_through_an_outage_longer_than_the_lease() -> None:
    """Nothing else would send it: the end commit is retried until it lands (or the shard is
    stopped), even while heartbeats fail and the lease has expired."""
    finished: list[int] = []
    client = ScriptedClient(
        shard_data={0: 2},
        readonly=True,
        checkpoints={0: at(2)},
        commit_errors=[E.SlsError("unreachable")] * 2,
    )
    ctx = context(client, Recorder(), on_finished=lambda: finished.append(0))
    task = ShardTask(0, dataclasses.replace(ctx, lease_valid=lambda: False))

    async def body(t: ShardTask) -> None:
        await until(lambda: finished, "on_finished")
        t.request_stop()

    anyio.run(run, task, body)
    assert client.commits(0) == [at(2)] * 3 and client.saved[0] == at(2)


def test_a_refused_resend_of_an_end_already_saved_is_no_ownership_loss() -> None:
    """The server ended the read-only shard on our earlier commit of its end and refuses the
    resend: the shard is finished, not lost to another consumer (no warning, no metric)."""
    finished: list[int] = []
    client = ScriptedClient(
        shard_data={0: 2},
        readonly=True,
        checkpoints={0: at(2)},
        commit_errors=[E.OwnershipLost("over")],
    )
    ctx = context(client, Recorder(), on_finished=lambda: finished.append(0))
    task = ShardTask(0, ctx)

    async def body(t: ShardTask) -> None:
        await until(lambda: finished, "on_finished")

    anyio.run(run, task, body)
    assert client.commits(0) == [at(2)] and task.lost
    assert ctx.metrics.ownership_lost.labels("0")._value.get() == 0


class NeverStarts(Recorder):
    def initialize(self, shard: int) -> None:
        raise RuntimeError("sink not there yet")


@pytest.mark.parametrize(("saved", "commits"), [(None, [at(0)]), (at(2), [])])
def test_a_shard_stopped_before_its_processor_started_saves_where_it_would_have_begun(
    saved: str | None, commits: list[str]
) -> None:
    """Revoked while its processor could not start: without a checkpoint, the start position
    is committed (a next owner resolving `start = "end"` later would skip what came in
    between); with one, nothing is."""
    checkpoints = {} if saved is None else {0: saved}
    client = ScriptedClient(shard_data={0: 3}, checkpoints=checkpoints)
    task = ShardTask(0, context(client, NeverStarts()))

    async def body(t: ShardTask) -> None:
        await until(lambda: t.status.processor_error, "a failed start")
        t.request_stop()

    _, exited = anyio.run(run, task, body)
    assert exited == [task] and client.commits(0) == commits


def test_a_handed_over_shard_keeps_its_final_commit_going_until_it_lands() -> None:
    """A rebalance stop whose final commit fails: the shard is still held (so the server keeps
    it ours) and the commit is retried, rather than handed over from an older checkpoint."""
    errors = [E.SlsError("busy")] * 4
    client = ScriptedClient(shard_data={0: 3}, commit_errors=errors)
    processor = Recorder(persist=False)
    task = ShardTask(0, context(client, processor))

    async def body(t: ShardTask) -> None:
        await until(lambda: processor.batches, "a batch")
        t.request_stop()

    _, exited = anyio.run(run, task, body)
    assert exited == [task] and client.saved[0] == at(3)
    assert client.commits(0) == [at(3)] * 5


def test_a_shutdown_does_not_wait_for_a_failing_final_commit() -> None:
    """When the daemon is shutting down, the grace bounds the stop: the final commit gets
    its attempts (before and after the processor's shutdown) and no more."""
    client = ScriptedClient(shard_data={0: 3}, commit_errors=[E.SlsError("busy")] * 4)
    processor = Recorder(persist=False)
    task = ShardTask(0, context(client, processor))

    async def body(t: ShardTask) -> None:
        await until(lambda: processor.batches, "a batch")
        t.no_more_retries.set()
        t.request_stop()

    _, exited = anyio.run(run, task, body)
    assert exited == [task] and 0 not in client.saved and task.commit_failed
    assert client.commits(0) == [at(3)] * 2


class FailsToShutDown(Recorder):
    def shutdown(self, tracker: Tracker) -> None:
        raise OSError(28, "No space left on device")  # a sink's last write


def test_a_processor_shutdown_that_raises_is_noted_for_the_exit_code() -> None:
    """A processor whose shutdown fails (a sink's last write): the shard still commits what
    was done and lets go, and notes it, so that a stopping daemon exits 1, not 0 (before,
    only a log line said so)."""
    client = ScriptedClient(shard_data={0: 3})
    processor = FailsToShutDown()
    task = ShardTask(0, context(client, processor))

    async def body(t: ShardTask) -> None:
        await until(lambda: processor.batches, "a batch")
        t.request_stop()

    _, exited = anyio.run(run, task, body)
    assert exited == [task] and task.shutdown_failed and not task.commit_failed
    assert client.saved[0] == at(3)


def test_ownership_lost_on_commit_stops_the_shard_without_committing_again() -> None:
    client = ScriptedClient(shard_data={0: 3}, commit_errors=[E.OwnershipLost("taken")])
    processor = Recorder()
    task = ShardTask(0, context(client, processor))

    async def body(t: ShardTask) -> None:
        await until(lambda: t.lost, "ownership lost")  # the task stops by itself

    states, exited = anyio.run(run, task, body)
    assert exited == [task] and task.lost
    assert client.commits(0) == [at(3)]  # the refused one; none after it
    assert 0 not in client.saved
    assert processor.events == ["initialize 0", "shutdown"]
    assert states[-1] == "stopping"


class HangingCommits(ScriptedClient):
    """A commit whose answer never comes (the client retrying into a partition): it ends only
    when cancelled, and then it was never saved."""

    cancelled = 0

    async def commit(
        self, logstore: str, group: str, consumer: str, shard: int, cursor: str, **_: Any
    ) -> None:
        self.calls.append(("commit", (shard, cursor)))
        try:
            await anyio.sleep_forever()
        finally:
            self.cancelled += 1


def test_a_drop_cancels_the_commit_in_flight() -> None:
    """The server expired us (`NotExistConsumerWithBody`) while a commit was being retried: the
    heartbeat drops the shard and rejoins. The commit's next attempt must not be sent: after
    the rejoin the shard may be ours again, another consumer's later checkpoint standing, and
    the stale cursor would move it back (a CI fault-proxy run saw 400 duplicates so)."""
    client = HangingCommits(shard_data={0: 3})
    task = ShardTask(0, context(client, Recorder()))

    async def body(t: ShardTask) -> None:
        await until(lambda: client.commits(0), "a commit in flight")
        t.drop()

    _states, exited = anyio.run(run, task, body)
    assert exited == [task] and task.lost
    assert client.cancelled == 1 and client.commits(0) == [at(3)]  # no attempt after the drop
    assert 0 not in client.saved and task.tracker is not None and task.tracker.committed is None


def test_a_processor_failing_under_the_stop_policy_fails_the_shard() -> None:
    client, processor = ScriptedClient(shard_data={0: 3}), Recorder(failures=5)
    policy = RetryPolicy(max_attempts=2, on_failure="stop", backoff=QUICK)
    task = ShardTask(0, context(client, processor, retry=policy))

    async def body(t: ShardTask) -> None:
        await until(lambda: t.status.state == "failed", "the shard failed")

    states, exited = anyio.run(run, task, body)
    assert states == ["starting", "consuming", "failed"]
    assert "processor failed 2 times" in task.status.reason
    snap = task.snapshot(anyio.run(_now), 0.0)
    assert snap.state == "failed" and snap.last_error is not None
    assert snap.last_error.message.startswith("process: attempt 2")
    assert processor.batches == [] and exited == [task]


async def _now() -> float:
    return anyio.current_time()


def test_a_failed_commit_is_noted_and_the_next_one_goes_through() -> None:
    busy = E.SlsError("busy")
    client = ScriptedClient(shard_data={0: 3}, commit_errors=[busy, busy])
    processor = Recorder()
    task = ShardTask(0, context(client, processor))

    async def body(t: ShardTask) -> None:
        await until(lambda: t.commit_failed, "the failed commit")
        assert t.status.last_error is not None
        assert t.status.last_error.message.startswith("commit: ")
        assert not await t.commit()  # still failing: nothing said yet
        assert await t.commit()  # the periodic commit would do this
        assert client.saved[0] == at(3) and not t.commit_failed
        assert await t.commit(resend=True)  # an ordinary success: nothing said
        t.request_stop()

    with structlog.testing.capture_logs() as logs:
        anyio.run(run, task, body)
    assert client.commits(0) == [at(3)] * 4
    # The end of the fault is said once, after its last failure, with the shard and cursor.
    events = [e["event"] for e in logs if e["event"].startswith("checkpoint_commit_")]
    assert events == ["checkpoint_commit_failed"] * 2 + ["checkpoint_commit_recovered"]
    [said] = [e for e in logs if e["event"] == "checkpoint_commit_recovered"]
    assert (said["shard"], said["cursor"], said["failures"]) == (0, at(3), 2)
    assert said["failing_for_s"] >= 0


class Batches(ScriptedClient):
    """Serves `sizes` as the shard's batches, one per pull: (log groups, logs per group)."""

    def __init__(self, sizes: list[tuple[int, int]]) -> None:
        super().__init__(shard_data={0: sum(groups for groups, _ in sizes)})
        self.sizes = sizes

    async def pull(self, logstore: str, shard: int, cursor: str, count: int, **_: Any) -> Pulled:
        start, seq = cursors.decode(cursor), 0
        for groups, logs in self.sizes:
            if seq == start:
                data = log_groups(groups, logs)
                return Pulled(data, groups, at(seq + groups), len(data), False, groups, len(data))
            seq += groups
        return Pulled(b"", 0, cursor, 0, False, 0, 0)


def test_the_lag_in_logs_follows_the_logs_per_group_read_lately() -> None:
    """5 groups of 100 logs, then two batches of 50 groups of 10: the lag in logs counts about
    10 per group (the old average over batches said 67.6: on-call audit, 5.5 times too high)."""
    client, processor = Batches([(5, 100), (50, 10), (50, 10)]), Recorder()
    task = ShardTask(0, context(client, processor))

    async def body(t: ShardTask) -> None:
        await until(lambda: len(processor.batches) == 3, "three batches")
        t.request_stop()

    anyio.run(run, task, body)
    assert 10.0 < task.status.fetch.logs_per_group < 12.0, task.status.fetch.logs_per_group


def test_a_shard_held_while_the_lease_has_expired_says_so() -> None:
    """No heartbeat answered within the group's timeout: the shard is not "consuming" (the
    service may have given it away); its state and reason say so, and whether a batch is
    held. Once the lease is renewed the batch is processed and the shard consumes again."""
    lease = {"valid": False}
    client, processor = ScriptedClient(shard_data={0: 3}), Recorder()
    ctx = dataclasses.replace(context(client, processor), lease_valid=lambda: lease["valid"])
    task = ShardTask(0, ctx)

    async def body(t: ShardTask) -> None:
        await until(lambda: t._held_since is not None, "the batch held")
        await anyio.sleep(0.05)
        snap = t.snapshot(anyio.current_time(), 0.0)
        assert snap.state == "lease_expired", snap
        assert snap.reason.startswith("lease expired: no heartbeat answered"), snap.reason
        assert "the batch in hand has been held unprocessed for" in snap.reason, snap.reason
        assert t.status.state == "consuming"  # what the shard does is unchanged
        assert processor.batches == []
        lease["valid"] = True
        await until(lambda: processor.batches, "the batch released")
        snap = t.snapshot(anyio.current_time(), 0.0)
        assert (snap.state, snap.reason) == ("consuming", "")
        lease["valid"] = False  # expired again, with no batch in hand
        snap = t.snapshot(anyio.current_time(), 0.0)
        assert snap.state == "lease_expired" and "no batch is processed" in snap.reason, snap
        t.request_stop()

    states, _ = anyio.run(run, task, body)
    assert "lease_expired" not in states  # the snapshot's word, not a state of the task


@pytest.mark.parametrize("persist", [True, False])
def test_persist_decides_whether_a_batch_commits_at_once(persist: bool) -> None:
    client, processor = ScriptedClient(shard_data={0: 3}), Recorder(persist=persist)
    task = ShardTask(0, context(client, processor))
    seen: dict[str, Any] = {}

    async def body(t: ShardTask) -> None:
        await until(lambda: processor.batches, "a batch")
        await anyio.sleep(0.05)
        seen["saved"] = client.saved.get(0)
        t.request_stop()

    anyio.run(run, task, body)
    assert seen["saved"] == (at(3) if persist else None)
    assert client.saved[0] == at(3)  # the stop commits what was saved either way


class Housekeeper(Recorder):
    """A processor with the optional `committed(cursor)` hook; it fails the first `failures`
    calls and notes whether `shutdown` had been called before each one."""

    def __init__(self, *, hook_failures: int = 0) -> None:
        super().__init__(persist=False)
        self.hook_failures = hook_failures
        self.committed_at: list[tuple[str, bool]] = []

    def committed(self, cursor: str) -> None:
        self.committed_at.append((cursor, "shutdown" in self.events))
        if self.hook_failures:
            self.hook_failures -= 1
            raise OSError("disk busy")


def test_the_committed_hook_gets_each_committed_cursor_and_its_failure_changes_nothing() -> None:
    client, processor = ScriptedClient(shard_data={0: 3}), Housekeeper(hook_failures=1)
    task = ShardTask(0, context(client, processor))

    async def body(t: ShardTask) -> None:
        await until(lambda: processor.batches, "a batch")
        assert await t.commit()  # the hook raises: logged, the commit still succeeded
        assert processor.committed_at == [(at(3), False)]
        assert await t.commit()  # nothing moved: no second call
        assert processor.committed_at == [(at(3), False)]
        assert t.status.state == "consuming" and not t.commit_failed
        t.request_stop()

    states, _ = anyio.run(run, task, body)
    assert states == ["starting", "consuming", "stopping"]
    assert client.commits(0) == [at(3)]
    assert processor.events == ["initialize 0", "shutdown"]


def test_the_committed_hook_is_never_called_after_shutdown() -> None:
    """The stop commits before `shutdown` (the hook runs: the processor is still there) and
    after it (no hook: the processor has let go; the next owner collects what is behind)."""
    client = ScriptedClient(shard_data={0: 3})

    class SavesAtShutdown(Housekeeper):
        def process(self, batch: Batch, tracker: Tracker) -> None:
            self.batches.append((batch.cursor, batch.next_cursor))
            self.ack = tracker.defer()

        def shutdown(self, tracker: Tracker) -> None:
            self.ack.done()
            super().shutdown(tracker)

    processor = SavesAtShutdown()
    task = ShardTask(0, context(client, processor))

    async def body(t: ShardTask) -> None:
        await until(lambda: processor.batches, "a batch")
        t.request_stop()

    anyio.run(run, task, body)
    # Before shutdown the start position (nothing committed yet), after it the deferred batch.
    assert client.commits(0) == [at(0), at(3)]
    assert processor.committed_at == [(at(0), False)]


class HangingStart(Recorder):
    """`initialize` waits on a sink that never answers (a database that is down)."""

    async def initialize(self, shard: int) -> None:  # type: ignore[override]
        self.events.append(f"initialize {shard}")
        await anyio.sleep_forever()


def test_a_stop_during_a_hanging_start_shuts_the_processor_down() -> None:
    """The start is given up at once (nothing was processed) and the processor made for it
    is shut down: what its start opened is not left behind."""
    client, processor = ScriptedClient(shard_data={0: 3}), HangingStart()
    task = ShardTask(0, context(client, processor))

    async def body(t: ShardTask) -> None:
        await until(lambda: processor.events == ["initialize 0"], "the start")
        t.request_stop()

    states, exited = anyio.run(run, task, body)
    assert states == ["starting", "stopping"]
    assert processor.events == ["initialize 0", "shutdown"]
    assert processor.batches == [] and exited == [task]
    assert client.commits(0) == [at(0)]  # only where it would have begun (no checkpoint yet)


class FailingStart(Recorder):
    """`initialize` fails every time (a sink that refuses the connection)."""

    def initialize(self, shard: int) -> None:
        raise RuntimeError("sink refused the connection")


def test_a_failing_start_is_shown_as_initialize_not_process() -> None:
    client, processor = ScriptedClient(shard_data={0: 3}), FailingStart()
    policy = RetryPolicy(max_attempts=2, on_failure="stop", backoff=QUICK)
    task = ShardTask(0, context(client, processor, retry=policy))

    async def body(t: ShardTask) -> None:
        await until(lambda: t.status.state == "failed", "the shard failed")

    anyio.run(run, task, body)
    snap = task.snapshot(anyio.run(_now), 0.0)
    assert snap.last_error is not None
    assert snap.last_error.message.startswith("initialize: attempt 2"), snap.last_error
    assert "sink refused the connection" in snap.last_error.message


class SavesInShutdown(Recorder):
    """The SDK's processor shape: `process` keeps the batches (to write them in bulk) without
    saving; `shutdown` writes what it kept and saves, as the SDK samples do. Its sink fails
    from the second batch on."""

    def process(self, batch: Batch, tracker: Tracker) -> None:
        if self.batches:
            self.events.append("sink down")
            raise RuntimeError("sink down")
        self.batches.append((batch.cursor, batch.next_cursor))

    def shutdown(self, tracker: Tracker) -> None:
        self.events.append("shutdown")
        tracker.save_checkpoint(persist=True)


@pytest.mark.parametrize("policy", ["stopping", "stop"])
def test_a_save_in_shutdown_does_not_cover_the_batch_left_unfinished(policy: str) -> None:
    """The second batch fails, then the shard stops with it in hand: a stop during its
    backoff ("stopping"), or the failure policy stopping the shard ("stop"). `shutdown`'s
    save covers the first batch, which the processor kept, and not the second one, which
    it never wrote: the checkpoint stops between them."""
    client, processor = ScriptedClient(shard_data={0: 3}), SavesInShutdown()
    if policy == "stopping":
        retry = RetryPolicy(backoff=Backoff(initial=60.0, cap=60.0))
    else:
        retry = RetryPolicy(max_attempts=1, on_failure="stop", backoff=QUICK)
    task = ShardTask(0, context(client, processor, retry=retry, max_log_groups=1))

    async def body(t: ShardTask) -> None:
        await until(lambda: "sink down" in processor.events, "the second batch failing")
        if policy == "stopping":
            t.request_stop()
        await until(lambda: "shutdown" in processor.events, "the shutdown")

    anyio.run(run, task, body)
    assert processor.batches == [(at(0), at(1))]
    assert client.saved[0] == at(1), client.commits(0)
    assert at(2) not in client.commits(0) and at(3) not in client.commits(0)


class FailsToStart(Recorder):
    """`initialize` opens something, then fails, the first `failures` times."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.start_failures = failures

    def initialize(self, shard: int) -> None:
        self.events.append(f"initialize {shard}")
        if self.start_failures:
            self.start_failures -= 1
            raise ConnectionRefusedError("sink down")


def test_a_failed_start_shuts_its_processor_down_before_the_next_attempt() -> None:
    """What a failed `initialize` opened before failing is released: each failed attempt's
    processor is shut down, then a new one starts."""
    client, processor = ScriptedClient(shard_data={0: 3}), FailsToStart(failures=2)
    task = ShardTask(0, context(client, processor))

    async def body(t: ShardTask) -> None:
        await until(lambda: t.status.state == "consuming", "the start")
        await until(lambda: client.saved.get(0) == at(3), "the batch committed")
        t.request_stop()

    anyio.run(run, task, body)
    assert processor.events == [
        "initialize 0",
        "shutdown",
        "initialize 0",
        "shutdown",
        "initialize 0",
        "shutdown",  # the stop
    ]


def test_a_revoke_while_the_service_fails_ends_the_start_at_once() -> None:
    """The checkpoint lookup fails (the service is down) and is retried with backoff; the
    shard revoked meanwhile stops without waiting out the backoff, and no processor is made."""
    client = ScriptedClient(shard_data={0: 3}, checkpoint_errors=[E.SlsError("down")] * 50)
    processor = Recorder()
    task = ShardTask(0, context(client, processor, backoff=Backoff(initial=60.0, cap=60.0)))

    async def body(t: ShardTask) -> None:
        await until(lambda: ("checkpoints", 0) in client.calls, "the lookup")
        t.request_stop()

    _, exited = anyio.run(run, task, body)  # run() fails after 20 s: the backoff is 60
    assert processor.events == [] and exited == [task]
    assert client.commits(0) == []


class HangsInProcess(SavesInShutdown):
    """Keeps the first batch; hangs on the second (a sink that never answers)."""

    async def process(self, batch: Batch, tracker: Tracker) -> None:  # type: ignore[override]
        if self.batches:
            self.events.append("hanging")
            await anyio.sleep_forever()
        self.batches.append((batch.cursor, batch.next_cursor))


def test_a_save_in_shutdown_does_not_cover_a_batch_abandoned_at_the_end_of_the_grace() -> None:
    """The supervisor abandons a shard whose `process` does not return by the end of the
    shutdown grace: it marks it abandoned and cancels it. The processor's `shutdown` then
    saves the SDK way: that covers the batch it kept, not the one it was cancelled in."""
    client, processor = ScriptedClient(shard_data={0: 3}), HangsInProcess()
    task = ShardTask(0, context(client, processor, max_log_groups=1))
    exited: list[ShardTask] = []

    async def on_exit(t: ShardTask) -> None:
        exited.append(t)

    async def main() -> None:
        scope = anyio.CancelScope()

        async def runner() -> None:
            with scope:
                await task.run(on_exit)

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(runner)
                await until(lambda: "hanging" in processor.events, "the second batch hanging")
                task.request_stop()
                task.abandoned = True  # as Supervisor.shutdown does when the grace ends
                scope.cancel()

    anyio.run(main)
    assert exited == [task] and "shutdown" in processor.events
    assert client.saved[0] == at(1), client.commits(0)
    assert at(2) not in client.commits(0) and at(3) not in client.commits(0)


def test_no_progress_counts_from_when_work_came_after_an_idle_spell() -> None:
    """A shard idle (caught up) for a while, then a batch that fails: "no progress" (what
    readiness judges a stall by) counts from the batch's arrival, not from the last batch
    finished before the spell (postgres audit: "no progress for 573s" for data 14 s old)."""
    client, processor = ScriptedClient(shard_data={0: 2}), Recorder()
    task = ShardTask(0, context(client, processor))

    async def body(t: ShardTask) -> None:
        await until(lambda: processor.batches, "the first batch")
        await until(lambda: t.status.fetch.found_nothing_at > t.status.last_progress, "idle")
        await anyio.sleep(0.5)  # the idle spell
        processor.failures = 10**6
        client.shard_data[0] = 4  # new data, whose batch fails
        await until(lambda: t.status.processor_error != "", "the failing batch")
        await anyio.sleep(0.1)
        snap = t.snapshot(time.monotonic(), 0.0)
        assert not snap.caught_up
        assert snap.seconds_since_progress < 0.45, snap.seconds_since_progress
        t.request_stop()

    anyio.run(run, task, body)
