"""`/status` in words an operator reads: positions, the time they were written, the lag."""

from __future__ import annotations

import dataclasses

import pytest

from loghubd.ops import views
from tests.unit.console.test_daemon_data import snap


def shard_status(**changes: object) -> dict[str, object]:
    daemon = snap(0.0)
    source = daemon.sources[0]
    shard = dataclasses.replace(source.shards[0], **changes)
    shards: list[dict[str, object]] = views.source_status(
        dataclasses.replace(source, shards=(shard,))
    )["shards"]
    return shards[0]


def test_a_shard_behind_shows_when_the_data_at_its_position_was_written() -> None:
    row = shard_status(lag_log_groups=12, lag_seconds=4.2, cursor_time=1_764_000_000.0)
    assert row["position_written_at"] == "2025-11-24T16:00:00Z"
    assert row["behind"] == "12 log groups, oldest unread written 4s ago"


@pytest.mark.parametrize(
    ("changes", "behind"),
    [
        ({"caught_up": True, "lag_log_groups": 0}, "caught up"),
        ({"lag_log_groups": None, "lag_seconds": None}, "not measured yet"),
        # fetched to the end but the batch keeps failing: `caught_up` is false, and so is this
        (
            {"caught_up": False, "lag_log_groups": 0, "processor_error": "ValueError: bad"},
            "fetched to the end, processing failing",
        ),
        ({"caught_up": False, "lag_log_groups": 0}, "fetched to the end, not all processed yet"),
        # pulls failing: unknown, whatever was measured last (a partition froze it at 0)
        (
            {
                "caught_up": False,
                "lag_log_groups": None,
                "pull_failing_for": 45.4,
                "pull_error": "cannot reach it",
            },
            "unknown: pulls failing for 45s: cannot reach it",
        ),
        ({"pull_failing_for": 3.0}, "unknown: pulls failing for 3s"),
    ],
)
def test_no_time_at_the_end_or_when_not_measured(changes: dict[str, object], behind: str) -> None:
    row = shard_status(cursor_time=None, **changes)
    assert row["position_written_at"] is None
    assert row["behind"] == behind


def test_pulls_failing_show_how_long_and_a_lease_run_out() -> None:
    assert shard_status(pull_failing_for=12.345)["pull_failing_for_s"] == 12.3
    assert shard_status()["pull_failing_for_s"] is None
    source = snap(0.0).sources[0]
    hb = source.heartbeat
    for seconds, expired in ((hb.timeout - 1, False), (hb.timeout + 1, True)):
        late = dataclasses.replace(
            source, heartbeat=dataclasses.replace(hb, seconds_since_ok=seconds)
        )
        assert views.source_status(late)["heartbeat"]["lease_expired"] is expired


def test_a_shard_held_past_the_lease_says_so_in_its_state_and_reason() -> None:
    row = shard_status(
        state="lease_expired",
        reason="lease expired: no heartbeat answered within the group's timeout",
        caught_up=False,
        lag_log_groups=None,
        pull_failing_for=45.0,
        pull_error="Unreachable: connection refused",
    )
    assert (row["state"], row["reason"]) == (
        "lease_expired",
        "lease expired: no heartbeat answered within the group's timeout",
    )
    assert row["behind"] == "unknown: pulls failing for 45s: Unreachable: connection refused"
