"""A processor that fails at one batch: retried with growing waits, never skipped; the
committed checkpoint stays at that batch meanwhile; with `dead_letter` the batch is written
to the dead-letter directory and consumption goes on.

The `flaky` test processor (daemon_harness) fails the batch holding log `fail_id` on its
first `fail_times` attempts and notes every attempt (time, cursors) in a file.
"""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path
from typing import Any

import pytest

from loghubd.protocol import cursor as cursors
from loghubd.protocol import pb
from tests.integration.daemon_harness import (
    Daemon,
    Pool,
    delivery_report,
    read_ids,
    seq_of,
    short,
    wait_until,
)

pytestmark = pytest.mark.slow

LOGSTORE = "fragile"
GROUP = "fragile-group"
COUNT = 20_000  # 200 groups of 100 over 2 shards
FAIL_ID = "f10050"  # in group 100: the middle of its shard
INITIAL_BACKOFF = 0.4


def attempts(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def at_end(pool: Pool) -> bool:
    cps = pool.admin.checkpoints(LOGSTORE, GROUP)
    return len(cps) == 2 and all(
        cp["checkpoint"]
        and cursors.to_seq(s, cp["checkpoint"])
        == cursors.to_seq(s, pool.admin.cursor(LOGSTORE, s, "end"))
        for s, cp in cps.items()
    )


def start(
    pool: Pool, fail_times: int, *, log_level: str = "info", **consumer: Any
) -> tuple[Daemon, Path]:
    pool.admin.create_logstore(LOGSTORE, 2)
    pool.produce(LOGSTORE, count=COUNT, group_size=100, prefix="f").wait()
    notes = pool.dir / "attempts.jsonl"
    daemon = pool.daemon(
        LOGSTORE,
        GROUP,
        "flaky",
        start=False,
        processor="flaky",
        processor_options={
            "path": str(pool.dir / "out"),
            "fail_id": FAIL_ID,
            "fail_times": fail_times,
            "attempts": str(notes),
        },
        # Small pulls: the failing batch has batches before and after it in its shard.
        consumer={
            "max_fetch_log_groups": 10,
            "retry_initial_backoff": INITIAL_BACKOFF,
            "retry_max_backoff": 10.0,
            **consumer,
        },
    )
    daemon.output = pool.dir / "out"
    daemon.config["log"]["level"] = log_level
    return daemon.start().wait_ready(), notes


def test_failing_batch_is_retried_with_growing_waits_and_checkpoint_holds(
    daemon_pool: Pool,
) -> None:
    pool = daemon_pool
    daemon, notes = start(pool, fail_times=3)

    # Watch the committed checkpoints while the batch fails.
    polls: list[tuple[float, dict[int, dict[str, Any]]]] = []

    def succeeded() -> bool:
        polls.append((time.time(), pool.admin.checkpoints(LOGSTORE, GROUP)))
        return len(attempts(notes)) >= 4

    wait_until(succeeded, 30, lambda: f"attempts: {attempts(notes)}\n{daemon.log_tail()}", 0.1)
    wait_until(lambda: at_end(pool), 30, lambda: daemon.log_tail())
    assert daemon.metric("loghubd_processor_errors_total") == 3
    assert daemon.metric("loghubd_processor_retries_total") == 3
    assert daemon.metric("loghubd_dead_lettered_batches_total") == 0
    assert daemon.stop() == 0, daemon.log_tail()

    tries = attempts(notes)
    assert [t["attempt"] for t in tries] == [1, 2, 3, 4], tries
    shard, cursor = tries[0]["shard"], tries[0]["cursor"]
    assert all((t["shard"], t["cursor"]) == (shard, cursor) for t in tries), "not the same batch"
    # The waits grow: exponential backoff with jitter puts wait n within [b/2, b] for
    # b = initial * 2**(n-1) (plus the time an attempt takes), so the ranges double.
    times = [t["time"] for t in tries]
    waits = [b - a for a, b in itertools.pairwise(times)]
    for n, wait in enumerate(waits, start=1):
        ceiling = INITIAL_BACKOFF * 2 ** (n - 1)
        assert ceiling / 2 - 0.02 <= wait <= ceiling + 0.3, (n, waits)
    assert waits[0] < waits[2], waits

    # Until the 4th attempt succeeded, the checkpoint never passed the failing batch; it did
    # reach it (everything before it was committed) and it moved past it afterwards.
    batch_seq, success = seq_of(cursor), times[3]
    during = [cps[shard]["checkpoint"] for t, cps in polls if times[0] <= t < success]
    assert during, "no checkpoint observed while the batch was failing"
    assert all(seq_of(cp) <= batch_seq for cp in during), (short(during), cursor)
    assert any(seq_of(cp) == batch_seq for cp in during), (short(during), cursor)
    assert seq_of(pool.admin.checkpoints(LOGSTORE, GROUP)[shard]["checkpoint"]) > batch_seq

    ids = read_ids([daemon.output])
    report = delivery_report([f"f{n}" for n in range(COUNT)], ids)
    assert report == {"missing": [], "duplicated": {}, "unexpected": []}, {
        k: short(v) for k, v in report.items()
    }
    failed = daemon.events("process_failed")
    assert len(failed) == 3
    assert not any("exception" in e for e in failed), "a traceback at log level info"
    # The fault's end is said once, with the attempts it took (on-call audit: the last
    # line of a journal was a failure long over).
    [recovered] = daemon.events("process_recovered")
    assert (recovered["shard"], recovered["cursor"], recovered["failures"]) == (shard, cursor, 3)
    assert recovered["failing_for_s"] >= waits[0], recovered


def test_with_debug_logging_a_failure_line_carries_the_plugins_traceback(
    daemon_pool: Pool,
) -> None:
    """A plugin author debugging a failing `process` needs its file and line: under log
    level debug (or `--debug`) the `process_failed` line has the traceback."""
    daemon, _notes = start(daemon_pool, fail_times=1, log_level="debug")
    wait_until(lambda: daemon.events("process_failed"), 30, daemon.log_tail)
    trace = daemon.events("process_failed")[0].get("exception", "")
    assert "Traceback (most recent call last)" in trace, daemon.events("process_failed")[0]
    assert "harness_processors.py" in trace and "fails on purpose" in trace, trace
    assert daemon.stop() == 0, daemon.log_tail()


def test_dead_letter_after_max_attempts_then_consumption_goes_on(daemon_pool: Pool) -> None:
    pool = daemon_pool
    daemon, notes = start(pool, fail_times=1_000, max_attempts=2, on_failure="dead_letter")
    wait_until(lambda: at_end(pool), 30, lambda: daemon.log_tail())
    assert daemon.metric("loghubd_dead_lettered_batches_total") == 1
    assert daemon.metric("loghubd_processor_errors_total") == 2
    assert daemon.stop() == 0, daemon.log_tail()

    tries = attempts(notes)
    assert [t["attempt"] for t in tries] == [1, 2], tries
    shard, cursor = tries[0]["shard"], tries[0]["cursor"]
    folder = daemon.dead_letter / f"shard-{shard}"
    pbs, notes_json = sorted(folder.glob("*.pb")), sorted(folder.glob("*.json"))
    assert len(pbs) == 1 and len(notes_json) == 1, list(folder.iterdir())
    meta = json.loads(notes_json[0].read_text())
    assert (meta["shard"], meta["cursor"], meta["attempts"]) == (shard, cursor, 2), meta
    assert meta["next_cursor"] == tries[0]["next_cursor"] and meta["data"] == pbs[0].name
    assert "fails on purpose" in meta["error"]
    groups = pb.LogGroupList.FromString(pbs[0].read_bytes()).LogGroups
    dead = [c.Value for g in groups for log in g.Logs for c in log.Contents if c.Key == "id"]
    assert FAIL_ID in dead and len(groups) == meta["log_groups"]

    # Everything else was delivered, exactly once; the dead-lettered batch was not.
    delivered = read_ids([daemon.output])
    assert not set(dead) & set(delivered)
    report = delivery_report([f"f{n}" for n in range(COUNT)], delivered + dead)
    assert report == {"missing": [], "duplicated": {}, "unexpected": []}, {
        k: short(v) for k, v in report.items()
    }
    assert [e["path"] for e in daemon.events("batch_dead_lettered")] == [str(notes_json[0])]


def test_a_stop_while_a_batch_fails_ends_the_retrying_and_loses_nothing(
    daemon_pool: Pool,
) -> None:
    """SIGTERM while a batch keeps failing: the daemon stops waiting to retry it at once,
    instead of sitting out `shutdown_grace` and abandoning the shard (exit 1). The batch is
    left unfinished, the checkpoint stays at it, and the next daemon delivers it and the rest:
    nothing lost, nothing twice."""
    pool = daemon_pool
    # Waits of 2.5-5 s and more between attempts; a grace far longer than the test waits.
    daemon, notes = start(
        pool,
        fail_times=1_000,
        retry_initial_backoff=5.0,
        retry_max_backoff=60.0,
        shutdown_grace=60.0,
    )
    wait_until(lambda: len(attempts(notes)) >= 2, 30, daemon.log_tail)
    before = len(attempts(notes))
    assert daemon.stop(timeout=20) == 0, daemon.log_tail()
    assert daemon.events("batch_interrupted"), daemon.log_tail()
    assert not daemon.events("shutdown_grace_expired"), daemon.log_tail()
    tries = attempts(notes)
    assert len(tries) <= before + 1, "the stop did not end the retrying"
    shard, cursor = tries[0]["shard"], tries[0]["cursor"]
    assert seq_of(pool.admin.checkpoints(LOGSTORE, GROUP)[shard]["checkpoint"]) == seq_of(cursor)

    second = pool.daemon(
        LOGSTORE,
        GROUP,
        "second",
        processor="flaky",
        processor_options={
            "path": str(pool.dir / "out-second"),
            "fail_id": FAIL_ID,
            "fail_times": 0,
            "attempts": str(pool.dir / "attempts-second.jsonl"),
        },
    ).wait_ready()
    wait_until(lambda: at_end(pool), 30, second.log_tail)
    assert second.stop() == 0, second.log_tail()
    ids = read_ids([pool.dir / "out", pool.dir / "out-second"])
    report = delivery_report([f"f{n}" for n in range(COUNT)], ids)
    assert report == {"missing": [], "duplicated": {}, "unexpected": []}, {
        k: short(v) for k, v in report.items()
    }
