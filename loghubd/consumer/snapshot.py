"""A read-only picture of the consumer, the one thing the ops surface reads about it.

`/status`, `/readyz`, `loghubd_ready` and the console are built from these frozen
dataclasses (`loghubd.ops.views`), never from the live objects: a snapshot refers to nothing
that changes, so a view can keep it, compare two of them (throughput between two scrapes) or
render it from any thread. Built by `SourceRunner.snapshot()` from what the consumer's parts
expose (`Supervisor.shard_snapshots`, `ShardTask.snapshot`); `Daemon.snapshot()` puts the
sources together with the readiness verdict.

The tree:

    DaemonSnapshot            consumer name, ready + reasons, taken_at
    └── SourceSnapshot        one per source: state, where it reads, credentials, heartbeat,
        │                     held shards, start-up state
        ├── HeartbeatSnapshot joined, age of the last answered heartbeat, last error
        └── ShardSnapshot     one per held shard: state, positions, lag, throughput
                              counters (batches / logs / bytes since the shard was taken),
                              the last error with its time

Ages are seconds before `taken_at` (a unix time), measured on the monotonic clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorNote:
    """The last error of a shard: what failed and when (unix seconds)."""

    message: str
    at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class ShardSnapshot:
    shard: int
    # starting | consuming | lease_expired | finished | stopping | failed ("failed" and still
    # held: parked). `lease_expired`: consuming, but no heartbeat was answered within the
    # group's timeout, so batches are held unprocessed (the shard may be another's by now).
    state: str
    reason: str  # why it failed, or why its lease expired ("" otherwise)
    processor_error: str  # why the batch being retried failed last ("" when none is)
    cursor: str  # the next position to pull
    checkpoint: str | None  # the last committed position (None: not known yet)
    caught_up: bool  # read up to the end of the shard, and no batch is failing meanwhile
    lag_log_groups: int | None  # behind the end of the shard (None: not measured yet)
    lag_seconds: float | None
    cursor_time: float | None  # unix time the log group at `cursor` was written (None: caught
    # up, or not measured yet)
    seconds_since_progress: float  # since the last batch was finished
    seconds_since_pull: float  # since the last answered pull (or since the source started)
    # Seconds pulls have been failing (None: the last was answered); the lag is unknown then.
    pull_failing_for: float | None = None
    pull_error: str = ""  # why the last pull failed, while they fail
    # Seconds the committed position has been holding back fetched data (0: all committed).
    checkpoint_age: float
    batches: int  # counters since the shard was taken
    logs: int
    bytes: int
    last_error: ErrorNote | None  # a failed pull, batch or commit (None: none so far)


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatSnapshot:
    joined: bool
    seconds_since_ok: float  # since the last answered heartbeat was sent
    interval: float
    timeout: float  # the group's: past it without an answer, the lease has expired
    last_error: str  # the last heartbeat error, or why there are no credentials


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceSnapshot:
    name: str
    state: str  # starting | running | stopping | stopped | done | failed
    error: str  # why it failed, or why start-up is not through yet ("" otherwise)
    consumer: str
    group: str
    endpoint: str
    project: str
    logstore: str
    credentials: Mapping[str, object]  # the provider's description (never a secret)
    shard_filter: tuple[int, ...] | None  # consumer.shards
    end: float | None  # consumer.end (a bounded run), unix seconds
    starting: bool  # the processor factory is still starting (e.g. a Spark warm-up)
    step: str = ""  # while starting: what start-up is doing, in words
    heartbeat: HeartbeatSnapshot
    held: tuple[int, ...]  # the shards reported in heartbeats
    assigned_outside_filter: tuple[int, ...]
    shards: tuple[ShardSnapshot, ...]  # by shard number
    taken_at: float
    proxy: str = ""  # the HTTP proxy its requests go through (no credentials), "" for none
    # The last sign of another process consuming under our consumer name (`twins`): the
    # shards whose checkpoints it moved, and how long ago (None: no sign lately).
    same_name_shards: tuple[int, ...] = ()
    seconds_since_same_name: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DaemonSnapshot:
    consumer: str
    sources: tuple[SourceSnapshot, ...]
    ready: bool  # what /readyz answers
    reasons: tuple[str, ...]  # why not, each prefixed with its source
    taken_at: float


def shown_state(
    state: str, reason: str, lease_valid: bool, held_since: float | None, now: float
) -> tuple[str, str]:
    """The state and reason a shard's snapshot shows. A consuming shard whose lease has
    expired is not consuming: it says so, and why (it read "consuming" through a partition
    while the service had given its shards away: on-call audit). `held_since`: monotonic
    time a batch began to wait for the lease (None: no batch waits)."""
    if state != "consuming" or lease_valid:
        return state, reason
    doing = (
        "no batch is processed"
        if held_since is None
        else f"the batch in hand has been held unprocessed for {max(0.0, now - held_since):.0f}s"
    )
    return "lease_expired", (
        "lease expired: no heartbeat answered within the group's timeout, so the service "
        f"may have given this shard to another consumer; {doing} until one is answered"
    )
