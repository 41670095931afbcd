"""Assignment: which shards this daemon holds, and what each heartbeat answer changes.

Pure: no I/O, no clock, no logging. The heartbeat loop feeds it the server's answers and
reports `report()` back; the supervisor starts and stops shard tasks from the returned `Diff`
and calls `stopped(shard)` when a shard task has finished.

Each shard is in at most one of three sets:

- running: a shard task is consuming it.
- stopping: its task was told to finish, commit and let go, but has not exited yet. It is still
  reported, because the server moves a shard to its next owner only once the old owner stops
  listing it (DESIGN.md, coordinator rule 6); dropping it early would let two daemons consume
  it at once.
- detached: stopping, but no longer reported, because `reset()` rejoined the group with [].

Invariants:

1. A shard is never started while a task for it is still running, stopping or detached: one
   task per shard, ever. A shard answered again while it stops is started by the first answer
   after `stopped(shard)`.
2. `report()` lists exactly the running and stopping shards, never detached ones: what we
   hold and must keep.
3. Shards outside `shard_filter` are never started nor reported.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Diff:
    """What the supervisor must do after a heartbeat answer."""

    to_start: frozenset[int]
    to_stop: frozenset[int]  # finish the in-flight batch, commit, let go


class Assignment:
    """The daemon's view of its shards; see the module docstring for the invariants."""

    def __init__(self, shard_filter: frozenset[int] | None = None) -> None:
        self._filter = shard_filter
        self._running: set[int] = set()
        self._stopping: set[int] = set()
        self._detached: set[int] = set()

    @property
    def shard_filter(self) -> frozenset[int] | None:
        return self._filter

    @property
    def running(self) -> frozenset[int]:
        return frozenset(self._running)

    @property
    def stopping(self) -> frozenset[int]:
        """Shards whose task is still finishing, reported or not (after `reset`)."""
        return frozenset(self._stopping | self._detached)

    @property
    def held(self) -> frozenset[int]:
        """What the next heartbeat reports: running and still-stopping shards."""
        return frozenset(self._running | self._stopping)

    def report(self) -> list[int]:
        """The heartbeat body: `held`, sorted."""
        return sorted(self._running | self._stopping)

    def apply_answer(self, answer: Iterable[int]) -> Diff:
        """Compare the server's answer with the running shards; returns what to start and stop."""
        wanted = set(answer)
        if self._filter is not None:
            wanted &= self._filter
        to_stop = self._running - wanted
        # A shard whose previous task is still finishing waits for the next answer (rule 1).
        to_start = wanted - self._running - self._stopping - self._detached
        self._running -= to_stop
        self._stopping |= to_stop
        self._running |= to_start
        return Diff(frozenset(to_start), frozenset(to_stop))

    def stopped(self, shard: int) -> None:
        """The task for `shard` has exited: it is let go (no longer reported).

        Also accepts a running shard whose task ended on its own (fenced out, read-only shard
        finished, or the `stop` failure policy): the daemon no longer holds it either way.
        """
        for shards in (self._running, self._stopping, self._detached):
            if shard in shards:
                shards.remove(shard)
                return
        raise ValueError(f"shard {shard} has no task")

    def reset(self) -> Diff:
        """The server forgot us (NotExistConsumerWithBody): report nothing and rejoin with [].

        Every task must stop; the returned `Diff` says which. They stay detached, not reported,
        until `stopped`, so a shard the rejoin hands back is not started twice (rule 1).
        """
        to_stop = frozenset(self._running)
        self._detached |= self._running | self._stopping
        self._running.clear()
        self._stopping.clear()
        return Diff(frozenset(), to_stop)
