"""Starts and stops one shard task per held shard, inside the supervisor's own task group,
and commits them all every `checkpoint_interval` (processors that saved with
`persist=False` rely on it).

Every commit goes through `ShardTask.commit` (fenced, after the processor's `flush`); what
starts one: this timer, a processor's `save_checkpoint(persist=True)` or `ack.done(persist=
True)` (the shard task, after the batch), a finished shard or window, and a shard's stop.

Now and then it also reads the group's checkpoints and asks `twins.CheckpointAudit` whether
one moved without us: another process consuming under our consumer name (readiness says so
while it lasts, `SAME_NAME_HOLD_S` after the last sign).

A shard whose processor failed under the `stop` policy is *parked*: still held (reported in
heartbeats, so no other consumer repeats the failure) but not consumed, and readiness says
why. It is let go when the server stops answering it.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

import anyio
import structlog
from anyio.abc import TaskGroup, TaskStatus

from loghubd.consumer.assignment import Assignment, Diff
from loghubd.consumer.shard import ShardContext, ShardTask
from loghubd.consumer.snapshot import ShardSnapshot
from loghubd.consumer.twins import CheckpointAudit, Finding, ServerCheckpoint, audit_every
from loghubd.ops.metrics import Metrics

log = structlog.get_logger("loghubd.supervisor")

# After the shutdown grace: how long cancelled shard tasks get to commit, shut their processor
# down and end, and then how long a commit of a task that did not end may take.
ABANDON_BOUND_S = 2.0

# Periodic commits (each a processor flush, then one request) running at once.
COMMIT_CONCURRENCY = 16
# A periodic commit still running after this long (or 3 checkpoint intervals, if longer) is
# logged once as `checkpoint_commit_slow`: which shard, and since when.
SLOW_COMMIT_S = 30.0
# How long the checkpoint read of an audit may hold up the commit tick it runs before.
AUDIT_READ_BOUND_S = 2.0
# After the last checkpoint moved by another process under our name, how long readiness
# keeps saying so: the pair may commit in turns only now and then.
SAME_NAME_HOLD_S = 600.0


@dataclass(frozen=True, slots=True)
class SameName:
    """The last sign of another process under our consumer name."""

    shards: tuple[int, ...]  # whose checkpoints it moved, at that audit
    at: float  # monotonic


class Waker:
    """Lets the heartbeat loop sleep until its interval ends or someone needs it sooner."""

    def __init__(self) -> None:
        self._event = anyio.Event()

    def wake(self) -> None:
        self._event.set()

    async def sleep(self, seconds: float) -> None:
        with anyio.move_on_after(seconds):
            await self._event.wait()
        self._event = anyio.Event()


class Supervisor:
    def __init__(
        self, ctx: ShardContext, assignment: Assignment, metrics: Metrics, waker: Waker
    ) -> None:
        self.ctx = ctx
        self.assignment = assignment
        self.metrics = metrics
        self.waker = waker
        self.tasks: dict[int, ShardTask] = {}
        self.parked: dict[int, ShardTask] = {}
        self._scopes: dict[int, anyio.CancelScope] = {}
        self._tg: TaskGroup | None = None
        self._idle = anyio.Event()
        self._idle.set()
        # Shards whose final commit during shutdown did not go through (the exit code says
        # so). A shard another consumer owns by now (we were expired: paused or cut off past
        # the timeout; our fenced commit was refused) is not counted, whenever that was found
        # out: its uncommitted work is given up on purpose and redone by its next owner.
        self.unflushed: list[int] = []
        self.closing = False  # shutting down: no new shard is started
        # Shards whose processor was still busy when the shutdown grace ended, and those of
        # them whose task had not ended `ABANDON_BOUND_S` after being cancelled.
        self.abandoned: list[int] = []
        self.unreturned: list[int] = []
        self.failed: list[int] = []  # shards stopped by a failure, as found at shutdown
        self.audit = CheckpointAudit(ctx.consumer)
        # Its lines name the group and consumer, as the shard tasks' do.
        self.log = log.bind(group=ctx.group, consumer=ctx.consumer)
        self.same_name: SameName | None = None
        # Shards whose checkpoint a forced reset moved while we hold them: their next
        # periodic commit is sent even if our position did not move since (see `_report`).
        self.recommit: set[int] = set()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self._commit_periodically)
            task_status.started()
            await anyio.sleep_forever()

    async def _commit_periodically(self) -> None:
        """Every interval, commit each shard whose previous periodic commit has ended, up to
        `COMMIT_CONCURRENCY` at a time. A shard whose sink is slow to flush delays its own
        next commit, no other shard's; and with hundreds of shards against a distant endpoint
        one request at a time would not fit in an interval."""
        interval = self.ctx.checkpoint_interval
        limiter = anyio.CapacityLimiter(COMMIT_CONCURRENCY)
        running: dict[ShardTask, float] = {}  # -> when its commit started
        warned: set[ShardTask] = set()

        async def commit(task: ShardTask) -> None:
            try:
                async with limiter:
                    resend = task.shard in self.recommit
                    self.recommit.discard(task.shard)
                    await task.commit(resend=resend)
            finally:
                del running[task]
                if task in warned:
                    warned.discard(task)
                    self.log.info("checkpoint_commit_slow_ended", shard=task.shard)

        ticks_per_audit = audit_every(interval)
        tick = 0
        async with anyio.create_task_group() as tg:
            while True:
                await anyio.sleep(interval)
                tick += 1
                if tick % ticks_per_audit == 0:
                    await self._audit_before_commits(interval)
                now = anyio.current_time()
                for task in self.all_tasks():
                    started = running.get(task)
                    if started is None:
                        running[task] = now
                        tg.start_soon(commit, task, name=f"commit-{task.shard}")
                    elif task not in warned and now - started > max(SLOW_COMMIT_S, 3 * interval):
                        warned.add(task)
                        self.log.warning(
                            "checkpoint_commit_slow",
                            shard=task.shard,
                            running_s=round(now - started, 1),
                            hint="the processor's flush (or the commit request) has not "
                            "returned; this shard's checkpoint waits, the others go on",
                        )

    async def _audit_before_commits(self, interval: float) -> None:
        """One read of the group's checkpoints, judged shard by shard (`twins`), taken just
        before a tick's periodic commits, when our own last one is an interval old (why:
        `loghubd.consumer.twins`). A failed or slow read is skipped (the commits go on after
        `AUDIT_READ_BOUND_S`, or one interval if shorter): the next one judges."""
        with anyio.move_on_after(min(AUDIT_READ_BOUND_S, interval)):
            try:
                await self.audit_once()
            except Exception as exc:
                self.log.debug("checkpoint_audit_failed", error=repr(exc)[:300])

    async def audit_once(self) -> None:
        tasks = dict(self.tasks)
        self.audit.keep_only(set(tasks))
        before = {shard: task.our_commits() for shard, task in tasks.items()}
        if not any(before.values()):
            return
        c = self.ctx
        answer = await c.client.checkpoints(c.settings.logstore, c.group)
        found: dict[Finding, list[int]] = {}
        for cp in answer:
            shard = cp.get("shard")
            task = tasks.get(shard) if isinstance(shard, int) else None
            if task is None or self.tasks.get(task.shard) is not task:
                continue
            ours = task.our_commits()
            if ours is None or ours != before[task.shard]:
                self.audit.forget(task.shard)  # a commit of ours ran meanwhile
                continue
            finding = self.audit.observe(
                task.shard,
                ours,
                ServerCheckpoint(
                    cursor=str(cp.get("checkpoint") or ""),
                    update_time=int(cp.get("updateTime") or 0),
                    consumer=str(cp.get("consumer") or ""),
                ),
            )
            if finding is not Finding.NONE:
                found.setdefault(finding, []).append(task.shard)
        for finding, shards in found.items():
            self._report(finding, shards)

    def same_name_lately(self, now: float) -> SameName | None:
        """The last sign of a process under our name, if within `SAME_NAME_HOLD_S` of `now`
        (monotonic)."""
        seen = self.same_name
        return seen if seen is not None and now - seen.at <= SAME_NAME_HOLD_S else None

    def _report(self, finding: Finding, shards: list[int]) -> None:
        self.metrics.checkpoints_moved.labels(finding.value).inc(len(shards))
        if finding is Finding.SAME_NAME:
            self.same_name = SameName(tuple(shards), time.monotonic())
            self.log.error(
                "consumer_name_shared",
                shards=shards,
                hint="another process consumes this group as the same consumer.name: the "
                "checkpoints of these shards moved, stamped with our name, without this daemon "
                "committing them, and every log of every shard the pair holds is processed "
                "twice; give each process its own consumer.name (the default, host name and "
                "pid, is unique)",
            )
        elif finding is Finding.RESET:
            self.log.warning(
                "checkpoint_reset_while_held",
                shards=shards,
                hint="the checkpoints were committed with no consumer (a forced `loghubd group "
                "reset`) while this daemon holds the shards: its next commit overwrites them; "
                "stop the group's consumers before a reset",
            )
            # Undone at the next tick, even on a shard with nothing new to commit: an idle or
            # finished one would otherwise never commit again, and a bounded run waiting for
            # the group to reach its window's end waited for ever (backfill audit).
            self.recommit.update(shards)
        else:
            self.log.info("checkpoint_moved_by_new_owner", shards=shards)

    def apply(self, diff: Diff) -> None:
        for shard in sorted(diff.to_stop):
            parked = self.parked.pop(shard, None)
            if parked is not None:
                self._let_go(parked)
            elif shard in self.tasks:
                self.tasks[shard].request_stop()
        for shard in sorted(diff.to_start):
            self._start(shard)
        if diff.to_start:
            self.metrics.rebalances.labels("gained").inc(len(diff.to_start))
        if diff.to_stop:
            self.metrics.rebalances.labels("lost").inc(len(diff.to_stop))
        self.metrics.held_shards.set(len(self.assignment.held))

    def drop(self, shards: frozenset[int]) -> None:
        """Stop these shards without committing: the server gave them to someone else (it
        expired us). Counted as lost, as a rebalance's are, so gained - lost stays held."""
        if shards:
            self.metrics.rebalances.labels("lost").inc(len(shards))
        for shard in shards:
            if shard in self.tasks:
                self.tasks[shard].drop()
            parked = self.parked.pop(shard, None)
            if parked is not None:
                self._let_go(parked)

    def _start(self, shard: int) -> None:
        assert self._tg is not None, "supervisor not running"
        task = ShardTask(shard, self.ctx)
        self.tasks[shard] = task
        self.metrics.start_shard(shard, task.checkpoint_age)
        self._idle = anyio.Event()
        self._tg.start_soon(self._run_task, task, name=f"shard-{shard}")

    async def _run_task(self, task: ShardTask) -> None:
        with anyio.CancelScope() as scope:
            self._scopes[task.shard] = scope
            await task.run(self._on_exit)

    async def _on_exit(self, task: ShardTask) -> None:
        self.tasks.pop(task.shard, None)
        self._scopes.pop(task.shard, None)
        # A final commit or a processor shutdown (a sink's last write) that failed while the
        # daemon stops: nothing is lost (the checkpoint stays before it), but the exit code
        # must say the stop was not clean.
        if self.closing and (task.commit_failed or task.shutdown_failed) and not task.lost:
            self.unflushed.append(task.shard)
        held_still = task.shard in self.assignment.running
        if task.status.state == "failed" and not task.lost and held_still:
            self.parked[task.shard] = task
            self.log.error("shard_parked", shard=task.shard, reason=task.status.reason)
        else:
            self._let_go(task)
        if not self.tasks:
            self._idle.set()

    def _let_go(self, task: ShardTask) -> None:
        with contextlib.suppress(ValueError):
            self.assignment.stopped(task.shard)
        self.metrics.forget_shard(task.shard)
        self.metrics.held_shards.set(len(self.assignment.held))
        self.waker.wake()  # tell the server promptly, so the next owner starts sooner

    def all_tasks(self) -> list[ShardTask]:
        return list(self.tasks.values())

    def window_blocked(self) -> list[int]:
        """For a bounded run: the parked shards, when every other shard held has reached its
        window's end (a shard that failed for good never will, and the run would wait for
        ever); [] otherwise."""
        if not self.parked or any(t.status.state != "finished" for t in self.tasks.values()):
            return []
        return sorted(self.parked)

    def shard_snapshots(self, now: float, started_at: float) -> tuple[ShardSnapshot, ...]:
        """Every held shard, consumed or parked, by shard number (`ShardTask.snapshot`)."""
        tasks = sorted([*self.tasks.values(), *self.parked.values()], key=lambda t: t.shard)
        return tuple(t.snapshot(now, started_at) for t in tasks)

    async def stop_all(self, grace: float) -> bool:
        """Finish in-flight batches within `grace`, then cancel; every shard's final commit
        and processor shutdown still run (shielded, bounded). True if everything was flushed
        and no shard had stopped on a failure.

        Shards still busy when the grace ends are *abandoned* (their processor call is
        cancelled, a synchronous one left running in its worker thread). A task that has not
        ended `ABANDON_BOUND_S` later runs processor code that ignores cancellation: what it
        finished is committed here, and it is listed in `unreturned` (the daemon then ends
        the process without waiting for it, see `loghubd.shutdown`)."""
        self.closing = True
        for task in list(self.tasks.values()):
            task.no_more_retries.set()
            task.request_stop()
        with anyio.move_on_after(grace):
            await self._idle.wait()
        if self.tasks:
            self.abandoned = sorted(self.tasks)
            self.log.warning("shutdown_grace_expired", shards=self.abandoned)
            for task in list(self.tasks.values()):
                task.abandoned = True
            for scope in list(self._scopes.values()):
                scope.cancel()
            with anyio.move_on_after(ABANDON_BOUND_S):
                await self._idle.wait()
            for task in list(self.tasks.values()):  # processor code that never returns
                with anyio.move_on_after(ABANDON_BOUND_S):
                    await task.commit()
            self.unreturned = sorted(self.tasks)
            self.log.error(
                "shutdown_stuck_shards",
                shards=self.abandoned,
                unreturned=self.unreturned,
                grace_s=grace,
                detail="processor code still running when the shutdown grace ended; "
                "their finished batches are committed, the one in hand is not",
            )
        # Shards stopped by a failure (a processor that gave up, or could not start): the
        # daemon's exit code says something failed.
        self.failed = sorted(self.parked)
        if self.failed:
            self.log.error("shards_failed", shards=self.failed)
        for task in list(self.parked.values()):
            self._let_go(task)
        self.parked.clear()
        return not self.unflushed and not self.abandoned and not self.failed
