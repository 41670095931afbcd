"""Checkpoints that move without us: another process under our consumer name. Pure: no I/O.

SLS knows a consumer only by its name. Two processes that share one name (a copied
configuration file, a Deployment's replicas with a fixed `consumer.name`) heartbeat as ONE
consumer: the server hands the same shards to "both", both consume every log of them, and
each one's commits pass the fence meant for the other. Nothing on the wire says so; the
server cannot tell them apart. What does show is the shard's checkpoint: it moves, stamped
with our name, while we sent nothing.

The supervisor reads the group's checkpoints every `audit_every` periodic commit ticks (one
`GetCheckPoint` for all shards), just before that tick's commits, and asks
`CheckpointAudit.observe` about every shard it holds whose commits are quiet: none in flight
while the read was out, the last one answered. A checkpoint is *foreign* when

- its cursor is not the last one we sent (nor, before our first commit, the one we started
  from), or
- its update time changed between two reads with no commit of ours between them (two
  processes that commit the same cursors, as consumers caught up at the same end do).

Who wrote it is the checkpoint's `consumer` field: our own name means a twin; "" a reset
(`loghubd group reset --force`, which commits with no consumer); another name, a consumer
that owns the shard now (a rebalance our next fenced commit will hear of: not a problem).

Why just before our own tick: a read sees only the checkpoint's last write. Our last periodic
commit was one interval ago, and a twin commits once per interval too, so the last write is
the twin's whenever it moved the cursor since ours (a shard with new logs): each of the pair
reads the other's cursor at its first audit once both commit, behind ours or ahead alike. A
read on a timer of its own met our own commit at every audit (both every 3 intervals) and was
thrown away whenever the commit went out first: one of two twins never judged.
Twins that commit the same cursor (both at the end of a quiet shard) are told apart only
when its update time moves while we send nothing.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass


class Finding(enum.Enum):
    NONE = "none"
    SAME_NAME = "same_name"  # another process commits as our consumer
    RESET = "reset"  # committed with no consumer: an operator's forced reset
    OTHER_CONSUMER = "other_consumer"  # the shard's new owner: a rebalance under way


@dataclass(frozen=True, slots=True)
class OurCommits:
    """What this daemon did to one shard's checkpoint, as of one moment."""

    task: int  # which holding of the shard (a new task starts a new history)
    attempts: int  # commit requests sent by that task
    last_sent: str | None  # the cursor of the last one (None: none sent yet)
    started_from: str  # the checkpoint the task read when it took the shard ("" for none)
    settled: bool  # no commit in flight, and the last one was answered

    def may_be_on_server(self, cursor: str) -> bool:
        # The server may store a cursor without its trailing newline.
        ours = self.started_from if self.last_sent is None else self.last_sent
        return cursor.strip() == ours.strip()


@dataclass(frozen=True, slots=True)
class ServerCheckpoint:
    cursor: str
    update_time: int  # as the server gives it (µs); 0 when it gives none
    consumer: str  # who committed it, as the server recorded it


@dataclass(frozen=True, slots=True)
class _Seen:
    task: int
    attempts: int
    update_time: int
    foreign: bool  # found foreign at that read (a checkpoint is reported once, not each read)


class CheckpointAudit:
    def __init__(self, consumer: str) -> None:
        self.consumer = consumer
        self._seen: dict[int, _Seen] = {}

    def observe(self, shard: int, ours: OurCommits, server: ServerCheckpoint) -> Finding:
        """Judge one read of `shard`'s checkpoint. `ours` must be the same before the read
        was sent and after its answer (the caller checks); unsettled, nothing is judged."""
        if not ours.settled:
            self._seen.pop(shard, None)
            return Finding.NONE
        before = self._seen.get(shard)
        if before is not None and before.task != ours.task:
            before = None
        unchanged = (
            before is not None
            and before.attempts == ours.attempts
            and before.update_time == server.update_time
        )
        moved = not ours.may_be_on_server(server.cursor)
        touched = (
            before is not None
            and before.attempts == ours.attempts
            and before.update_time != 0
            and server.update_time != before.update_time
        )
        foreign = moved or touched
        self._seen[shard] = _Seen(ours.task, ours.attempts, server.update_time, foreign)
        if not foreign or (unchanged and before is not None and before.foreign):
            return Finding.NONE
        if server.consumer == self.consumer:
            return Finding.SAME_NAME
        if server.consumer == "":
            return Finding.RESET
        return Finding.OTHER_CONSUMER

    def forget(self, shard: int) -> None:
        """The shard is no longer ours, or a commit of ours was in flight: start over."""
        self._seen.pop(shard, None)

    def keep_only(self, shards: set[int]) -> None:
        for shard in [s for s in self._seen if s not in shards]:
            del self._seen[shard]


def audit_every(checkpoint_interval: float) -> int:
    """Every how many periodic commit ticks the group's checkpoints are read (before that
    tick's commits): the fewest lasting `max(5 s, 3 intervals)`, a request each per daemon."""
    return max(1, math.ceil(max(5.0, 3.0 * checkpoint_interval) / checkpoint_interval - 1e-9))


def audit_interval(checkpoint_interval: float) -> float:
    """How often the group's checkpoints are read, in seconds."""
    return audit_every(checkpoint_interval) * checkpoint_interval
