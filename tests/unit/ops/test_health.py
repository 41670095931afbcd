"""Readiness verdicts from status snapshots (pure, table-driven)."""

from __future__ import annotations

import pytest

from loghubd.ops.health import (
    ShardView,
    Snapshot,
    SourceState,
    readiness,
    readiness_of_sources,
)


def snap(**kw: object) -> Snapshot:
    base: dict[str, object] = {
        "joined": True,
        "seconds_since_heartbeat": 1.0,
        "heartbeat_interval": 5.0,
        "timeout": 15.0,
        "last_heartbeat_error": "",
        "shards": (),
        "starting": False,
    }
    base.update(kw)
    return Snapshot(**base)  # type: ignore[arg-type]


def shard(
    state: str = "consuming",
    *,
    caught_up: bool = True,
    progress: float = 1.0,
    pull: float = 0.5,
    reason: str = "",
) -> ShardView:
    return ShardView(7, state, reason, caught_up, progress, pull)


@pytest.mark.parametrize(
    ("snapshot", "ready", "reason_part"),
    [
        (snap(), True, None),
        (snap(shards=(shard(),)), True, None),
        (snap(starting=True), False, "processor is starting"),
        # what start-up is doing, before anything failed
        (
            snap(starting=True, start_step="finding or creating consumer group g"),
            False,
            "starting: finding or creating consumer group g",
        ),
        (
            snap(starting=True, start_step="starting the processor", start_problem="refused"),
            False,
            "starting: refused",
        ),
        # what holds the start-up up is named (issue #18: not "processor is starting")
        (
            snap(starting=True, start_problem="cannot reach the service, retrying"),
            False,
            "starting: cannot reach the service, retrying",
        ),
        # a shard whose processor cannot start yet (retried under the failure policy)
        (
            snap(shards=(shard("starting", reason="processor cannot start on shard 7"),)),
            False,
            "shard 7 is not consuming yet: processor cannot start on shard 7",
        ),
        (snap(shards=(shard("starting"),)), True, None),  # just starting: no reason
        # another process under our consumer name moved checkpoints (loghubd.consumer.twins)
        (
            snap(consumer="web-1", same_name_shards=(2, 5), seconds_since_same_name=42.0),
            False,
            "another process consumes as consumer 'web-1': it moved the checkpoint of shard "
            "2, 5 42s ago",
        ),
        (snap(joined=False, last_heartbeat_error="Unreachable: refused"), False, "Unreachable"),
        (snap(seconds_since_heartbeat=10.5), False, "last successful heartbeat 10.5s ago"),
        (snap(seconds_since_heartbeat=9.9), True, None),  # within 2 intervals
        (
            snap(shards=(shard("failed", reason="processor failed 3 times"),)),
            False,
            "shard 7 stopped: processor failed 3 times",
        ),
        # behind and no progress for a minute: stuck
        (snap(shards=(shard(caught_up=False, progress=61.0),)), False, "no progress"),
        # caught up and idle is fine, however long
        (snap(shards=(shard(caught_up=True, progress=3600.0),)), True, None),
        (snap(shards=(shard(pull=120.0),)), False, "has not pulled"),
        (snap(shards=(shard("finished", pull=999.0),)), True, None),
    ],
)
def test_readiness(snapshot: Snapshot, ready: bool, reason_part: str | None) -> None:
    verdict = readiness(snapshot)
    assert verdict.ready is ready
    if reason_part is None:
        assert verdict.reasons == ()
    else:
        assert any(reason_part in r for r in verdict.reasons), verdict.reasons


@pytest.mark.parametrize(
    ("sources", "ready", "reasons"),
    [
        ([SourceState("a", snap()), SourceState("b", snap())], True, ()),
        (
            [SourceState("a", snap()), SourceState("b", snap(joined=False))],
            False,
            ("source b: not joined to the consumer group",),
        ),
        (
            [SourceState("a", snap(), failed="ensure_group: LogStoreNotExist: x")],
            False,
            ("source a: cannot start: ensure_group: LogStoreNotExist: x",),
        ),
        # A bounded source that finished its window is done, not failing.
        ([SourceState("a", snap(joined=False), done=True), SourceState("b", snap())], True, ()),
        (
            [
                SourceState("a", snap(starting=True)),
                SourceState("b", snap(seconds_since_heartbeat=30.0)),
            ],
            False,
            ("source a: processor is starting", "source b: last successful heartbeat 30.0s ago"),
        ),
    ],
)
def test_readiness_of_sources(
    sources: list[SourceState], ready: bool, reasons: tuple[str, ...]
) -> None:
    verdict = readiness_of_sources(sources)
    assert (verdict.ready, verdict.reasons) == (ready, reasons)
