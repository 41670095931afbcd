"""The daemon console's history of snapshots (pure)."""

from __future__ import annotations

import re
from dataclasses import replace

from loghubd.console import daemon_pages
from loghubd.console.daemon_data import POINTS, History
from loghubd.consumer.snapshot import (
    DaemonSnapshot,
    ErrorNote,
    HeartbeatSnapshot,
    ShardSnapshot,
    SourceSnapshot,
)


def snap(
    when: float,
    logs: int = 0,
    *,
    lag: float | None = 0.0,
    reason: str = "",
    error: str = "",
    last_error: ErrorNote | None = None,
) -> DaemonSnapshot:
    shard = ShardSnapshot(
        shard=0,
        state="consuming",
        reason=reason,
        processor_error="",
        cursor="",
        checkpoint=None,
        caught_up=False,
        lag_log_groups=0,
        lag_seconds=lag,
        cursor_time=None,
        seconds_since_progress=0.0,
        seconds_since_pull=0.0,
        checkpoint_age=0.0,
        batches=0,
        logs=logs,
        bytes=0,
        last_error=last_error,
    )
    source = SourceSnapshot(
        name="a",
        state="running",
        error=error,
        consumer="c",
        group="g",
        endpoint="http://x",
        project="p",
        logstore="l",
        credentials={},
        shard_filter=None,
        end=None,
        starting=False,
        heartbeat=HeartbeatSnapshot(
            joined=True, seconds_since_ok=0.0, interval=1.0, timeout=4.0, last_error=""
        ),
        held=(0,),
        assigned_outside_filter=(),
        shards=(shard,),
        taken_at=when,
    )
    return DaemonSnapshot(consumer="c", sources=(source,), ready=True, reasons=(), taken_at=when)


def test_throughput_is_logs_per_second_between_samples_and_a_restart_counts_nothing() -> None:
    h = History()
    for t, logs in [(0, 0), (2, 100), (4, 300), (6, 50), (8, 150)]:
        h.record(snap(t, logs, lag=t / 2))
    assert h.throughput(("a", 0)) == [50.0, 100.0, 0.0, 50.0]
    assert h.lag(("a", 0)) == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert h.span(("a", 0)) == 8
    assert h.throughput(("a", 9)) == [] and h.lag(("b", 0)) == []


def test_series_are_thinned_to_a_few_points_ending_with_the_newest() -> None:
    h = History(keep=90)
    for t in range(200):
        h.record(snap(t, t, lag=None if t == 5 else float(t)))
    lag = h.lag(("a", 0))
    assert len(lag) <= POINTS and lag[-1] == 199.0
    assert lag == sorted(lag)


def test_errors_are_noted_once_with_their_time() -> None:
    h = History()
    h.record(snap(1))
    h.record(snap(2, reason="boom"))
    h.record(snap(3, reason="boom"))  # the same error again: not a new entry
    h.record(snap(4, last_error=ErrorNote(message="pull failed", at=3.5)))
    h.record(snap(5, last_error=ErrorNote(message="pull failed", at=3.5)))
    h.record(snap(6, reason="boom", error="cannot start"))
    errors = [(e.when, e.shard, e.text) for e in h.errors()]
    assert [when for when, _s, _t in errors] == [6, 6, 3.5, 2]  # newest first
    assert sorted(errors) == [
        (2, 0, "boom"),
        (3.5, 0, "pull failed"),
        (6, -1, "cannot start"),
        (6, 0, "boom"),
    ]


def test_the_daemon_page_shows_its_shards_fifty_at_a_time() -> None:
    one = snap(1000.0)
    source = one.sources[0]
    shards = tuple(replace(source.shards[0], shard=i) for i in range(60))
    wide = replace(one, sources=(replace(source, shards=shards, held=tuple(range(60))),))
    history = History()
    history.record(wide)
    for wanted, shown, live in ((None, range(50), "/"), ("2", range(50, 60), "/?page=2")):
        view = daemon_pages.daemon(wide, history, {"a": "jsonl"}, "x", wanted)
        rows = re.findall(r'<tr><th scope="row">a / (\d+)</th>', view.regions["daemon"])
        assert rows == [str(i) for i in shown], wanted
        assert f'data-live="{live}"' in view.markup()
        assert "shards 1 to 50 of 60" in view.regions["daemon"] or wanted == "2"


def test_the_sources_table_says_which_proxy_a_source_goes_through() -> None:
    direct = snap(1000.0)
    proxied = replace(direct, sources=(replace(direct.sources[0], proxy="http://proxy:3128"),))
    for shown, expected in ((direct, "p/l at http://x<"), (proxied, "via proxy http://proxy:3128")):
        history = History()
        history.record(shown)
        region = daemon_pages.daemon(shown, history, {"a": "jsonl"}, "x").regions["daemon"]
        assert expected in region, region


def test_the_daemon_page_says_the_lag_is_unknown_while_pulls_fail_and_a_lease_expired() -> None:
    """Not "0.0 s" or "caught up" from the lag measured before the outage (on-call audit)."""
    one = snap(1000.0)
    source = one.sources[0]
    shard = replace(
        source.shards[0],
        state="lease_expired",
        reason="lease expired: no heartbeat answered within the group's timeout",
        caught_up=False,
        lag_log_groups=None,
        lag_seconds=None,
        pull_failing_for=45.4,
        pull_error="Unreachable: connection refused",
    )
    failing = replace(one, sources=(replace(source, shards=(shard,)),))
    history = History()
    history.record(failing)
    region = daemon_pages.daemon(failing, history, {"a": "jsonl"}, "x").regions["daemon"]
    [row] = re.findall(r'<tr><th scope="row">a / 0</th>(.*?)</tr>', region)
    assert '<span class="badge bad">lease expired</span>' in row, row
    assert "</svg> unknown<" in row and "unknown: pulls failing for 45s" in row, row
    assert "0.0 s" not in row and "caught up" not in row, row
    assert "lease expired: no heartbeat answered" in row, row
