"""The daemon's ops views, built from the consumer's read-only snapshot only.

`readiness` turns source snapshots into the `/readyz` verdict (the rules are `health`'s,
pure); `status` is the `/status` document: the first source's fields at the top level (what
a single-source daemon always showed) and every source under `sources`. Neither looks at a
live object: a new view (the console, a CLI) is a function of `DaemonSnapshot` too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from loghubd.consumer.snapshot import DaemonSnapshot, SourceSnapshot
from loghubd.ops import health


def health_snapshot(source: SourceSnapshot) -> health.Snapshot:
    """What `health.readiness` judges of one source."""
    hb = source.heartbeat
    return health.Snapshot(
        joined=hb.joined,
        seconds_since_heartbeat=hb.seconds_since_ok,
        heartbeat_interval=hb.interval,
        timeout=hb.timeout,
        last_heartbeat_error=hb.last_error,
        shards=tuple(
            health.ShardView(
                s.shard,
                s.state,
                s.reason or s.processor_error,
                s.caught_up,
                s.seconds_since_progress,
                s.seconds_since_pull,
            )
            for s in source.shards
        ),
        starting=source.starting,
        start_problem=source.error if source.state == "starting" else "",
    )


def source_state(source: SourceSnapshot) -> health.SourceState:
    failed = source.error if source.state == "failed" else ""
    return health.SourceState(source.name, health_snapshot(source), failed, source.state == "done")


def readiness(sources: Sequence[SourceSnapshot]) -> health.Verdict:
    """`/readyz`: ready when every source is (a bounded source that is done counts as ready)."""
    return health.readiness_of_sources([source_state(s) for s in sources])


def source_status(source: SourceSnapshot) -> dict[str, Any]:
    """One source in `/status`."""
    return {
        "name": source.name,
        "state": source.state,
        "error": source.error,
        "consumer": source.consumer,
        "group": source.group,
        "endpoint": source.endpoint,
        "project": source.project,
        "logstore": source.logstore,
        "credentials": dict(source.credentials),
        "shard_filter": None if source.shard_filter is None else list(source.shard_filter),
        "end": source.end,
        "joined": source.heartbeat.joined,
        "held": list(source.held),
        "assigned_outside_filter": list(source.assigned_outside_filter),
        "shards": [
            {
                "shard": s.shard,
                "state": s.state,
                "reason": s.reason,
                "cursor": s.cursor,
                "checkpoint": s.checkpoint,
                "lag_log_groups": s.lag_log_groups,
                "lag_seconds": s.lag_seconds,
                "caught_up": s.caught_up,
                "processor_error": s.processor_error,
            }
            for s in source.shards
        ],
    }


def status(daemon: DaemonSnapshot) -> dict[str, Any]:
    """`/status`: the first source's fields at the top level, and every source."""
    sources = [source_status(s) for s in daemon.sources]
    first = {k: v for k, v in sources[0].items() if k not in ("name", "state", "error")}
    return {**first, "sources": sources}
