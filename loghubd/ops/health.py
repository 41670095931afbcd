"""Liveness and readiness from status snapshots. Pure: no I/O, time is an argument.

`readiness` judges one source (one consumer of one logstore); `readiness_of_sources` judges
the daemon: ready when every source is, each reason prefixed with its source's name. A source
that failed to start permanently keeps the daemon not ready (with the error); a bounded source
that finished its window is done, not failing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ShardView:
    shard: int
    state: str  # starting | consuming | finished | stopping | failed
    reason: str  # why it failed, or why its processor is failing while it retries
    caught_up: bool
    seconds_since_progress: float
    seconds_since_pull: float


@dataclass(frozen=True, slots=True)
class Snapshot:
    joined: bool
    seconds_since_heartbeat: float
    heartbeat_interval: float
    timeout: float
    last_heartbeat_error: str
    shards: tuple[ShardView, ...]
    starting: bool = False  # the source is starting (group set-up, processor factory start)
    start_problem: str = ""  # why start-up is not through yet (e.g. the service unreachable)
    start_step: str = ""  # what start-up is doing meanwhile, when nothing failed (yet)
    consumer: str = ""
    # Shards whose checkpoints another process under our consumer name moved lately (`twins`)
    same_name_shards: tuple[int, ...] = ()
    seconds_since_same_name: float | None = None


@dataclass(frozen=True, slots=True)
class Verdict:
    ready: bool
    reasons: tuple[str, ...]


# A shard that is behind yet made no progress for this long is stuck.
STALL_AFTER_S = 60.0


def readiness(snap: Snapshot) -> Verdict:
    reasons: list[str] = []
    if snap.starting:
        doing = snap.start_problem or snap.start_step
        reasons.append(f"starting: {doing}" if doing else "processor is starting")
    if not snap.joined:
        reasons.append(
            "not joined to the consumer group"
            + (f": {snap.last_heartbeat_error}" if snap.last_heartbeat_error else "")
        )
    elif snap.seconds_since_heartbeat > max(
        2 * snap.heartbeat_interval, snap.heartbeat_interval + 1.0
    ):
        reasons.append(
            f"last successful heartbeat {snap.seconds_since_heartbeat:.1f}s ago"
            + (f": {snap.last_heartbeat_error}" if snap.last_heartbeat_error else "")
        )
    if snap.seconds_since_same_name is not None:
        shards = ", ".join(str(s) for s in snap.same_name_shards)
        reasons.append(
            f"another process consumes as consumer {snap.consumer!r}: it moved the checkpoint "
            f"of shard {shards} {snap.seconds_since_same_name:.0f}s ago, so those logs are "
            "processed twice; give each process its own consumer.name"
        )
    for s in snap.shards:
        if s.state == "failed":
            reasons.append(f"shard {s.shard} stopped: {s.reason}")
        elif s.state == "starting" and s.reason:
            reasons.append(f"shard {s.shard} is not consuming yet: {s.reason}")
        elif (
            s.state == "consuming" and not s.caught_up and s.seconds_since_progress > STALL_AFTER_S
        ):
            reasons.append(
                f"shard {s.shard} made no progress for {s.seconds_since_progress:.0f}s"
                + (f": processor failing, {s.reason}" if s.reason else "")
            )
        elif s.state == "consuming" and s.seconds_since_pull > max(STALL_AFTER_S, snap.timeout):
            reasons.append(f"shard {s.shard} has not pulled for {s.seconds_since_pull:.0f}s")
    return Verdict(not reasons, tuple(reasons))


@dataclass(frozen=True, slots=True)
class SourceState:
    """One source as readiness sees it."""

    name: str
    snapshot: Snapshot
    failed: str = ""  # a permanent start-up error: the source does not run
    done: bool = False  # a bounded run that reached its end: stopped on purpose


def readiness_of_sources(sources: Sequence[SourceState]) -> Verdict:
    reasons: list[str] = []
    for s in sources:
        if s.failed:
            reasons.append(f"source {s.name}: cannot start: {s.failed}")
        elif not s.done:
            reasons.extend(f"source {s.name}: {r}" for r in readiness(s.snapshot).reasons)
    return Verdict(not reasons, tuple(reasons))
