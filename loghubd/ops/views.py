"""The daemon's ops views, built from the consumer's read-only snapshot only.

`readiness` turns source snapshots into the `/readyz` verdict (the rules are `health`'s,
pure); `status` is the `/status` document: the consumer name and every source under
`sources`. Neither looks at a
live object: a new view (the console, a CLI) is a function of `DaemonSnapshot` too.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from loghubd.consumer.snapshot import DaemonSnapshot, SourceSnapshot
from loghubd.ops import health
from loghubd.ops.metrics import ConfigReloads
from loghubd.protocol import cursor as cursors


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
        start_step=source.step,
        consumer=source.consumer,
        same_name_shards=source.same_name_shards,
        seconds_since_same_name=source.seconds_since_same_name,
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
        "proxy": source.proxy or None,
        "project": source.project,
        "logstore": source.logstore,
        "credentials": dict(source.credentials),
        "shard_filter": None if source.shard_filter is None else list(source.shard_filter),
        "end": source.end,
        "joined": source.heartbeat.joined,
        # the group's timeout as the service holds it, and the interval that keeps us in it
        "heartbeat": {
            "interval": round(source.heartbeat.interval, 3),
            "timeout": source.heartbeat.timeout,
            "seconds_since_ok": round(source.heartbeat.seconds_since_ok, 1),
            # No heartbeat answered within the timeout: the service may have given the shards
            # to others, so each holds its batch unprocessed until one is answered.
            "lease_expired": source.heartbeat.joined
            and source.heartbeat.seconds_since_ok > source.heartbeat.timeout,
        },
        "held": list(source.held),
        "assigned_outside_filter": list(source.assigned_outside_filter),
        # another process under this consumer name moved these checkpoints lately (`twins`)
        "consumer_name_shared": None
        if source.seconds_since_same_name is None
        else {
            "shards": list(source.same_name_shards),
            "seconds_ago": round(source.seconds_since_same_name, 1),
        },
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
                # pulls failing for this long (null: the last was answered): lag unknown
                "pull_failing_for_s": None
                if s.pull_failing_for is None
                else round(s.pull_failing_for, 1),
                # readable forms (issue #18): positions as log-group numbers, the lag in words
                "position": readable_position(s.shard, s.cursor),
                "position_written_at": None if s.cursor_time is None else _iso(s.cursor_time),
                "checkpoint_position": readable_position(s.shard, s.checkpoint),
                "behind": behind(
                    s.lag_log_groups,
                    s.lag_seconds,
                    s.caught_up,
                    failing=bool(s.processor_error),
                    pull_failing_for=s.pull_failing_for,
                    pull_error=s.pull_error,
                ),
                "last_error": None
                if s.last_error is None
                else {"message": s.last_error.message, "at": _iso(s.last_error.at)},
            }
            for s in source.shards
        ],
    }


def readable_position(shard: int, cursor: str | None) -> str | None:
    """A cursor as the log-group number it stands for: `log group 1,234` (counted from the
    shard's first position on `loghubd serve`; SLS's cursors are numbers of their own); None
    for no cursor or one that is not a number."""
    if not cursor:
        return None
    try:
        return f"log group {cursors.to_seq(shard, cursor):,}"
    except cursors.InvalidCursorString:
        pass
    try:
        return f"log group {cursors.decode(cursor):,}"
    except cursors.InvalidCursorString:
        return None


def behind(
    lag_log_groups: int | None,
    lag_seconds: float | None,
    caught_up: bool,
    *,
    failing: bool = False,
    pull_failing_for: float | None = None,
    pull_error: str = "",
) -> str:
    """The lag in words: `caught up`, `12 log groups, oldest unread written 4s ago`.

    `caught up` only when the `caught_up` field next to it says so: read to the end and no
    batch failing. The lag is measured from the fetch position, so a lag of 0 alone says
    only that everything has been fetched: batches may still be in the processor, or failing
    over and over (`failing`: the shard's `processor_error` is set). While pulls fail
    (`pull_failing_for` seconds) the lag is unknown, and said so: the last measured one
    would read "caught up" through a partition while logs pile up.
    """
    if pull_failing_for is not None:
        text = f"unknown: pulls failing for {pull_failing_for:.0f}s"
        return text + (f": {pull_error}" if pull_error else "")
    if caught_up and not failing:
        return "caught up"
    if lag_log_groups is None:
        text = "not measured yet"
    elif lag_log_groups == 0:
        text = "fetched to the end" + ("" if failing else ", not all processed yet")
    else:
        text = f"{lag_log_groups:,} log groups"
        if lag_seconds is not None:
            text += f", oldest unread written {lag_seconds:.0f}s ago"
    return text + (", processing failing" if failing else "")


def _iso(when: float) -> str:
    return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def config_status(reloads: ConfigReloads) -> dict[str, Any]:
    """`/status`'s `config`: when the running configuration was loaded, the last reload's
    check (null when none since)."""
    last = None
    if reloads.last is not None:
        at, problem = reloads.last
        last = {"at": _iso(at), "accepted": problem is None, "problem": problem}
    return {"loaded_at": _iso(reloads.loaded_at), "last_reload": last}


def status(daemon: DaemonSnapshot) -> dict[str, Any]:
    """`/status`: the daemon's consumer name and every source, each once (it used to repeat
    the first source at the top level: every shard twice)."""
    sources = [source_status(s) for s in daemon.sources]
    return {"consumer": sources[0]["consumer"], "sources": sources}
