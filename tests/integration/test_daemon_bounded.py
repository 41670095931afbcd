"""Bounded runs (`consumer.end`): re-process a past window and exit 0 by themselves.

Logs are written in phases a, b, c with pauses between them, so their receive times fall on
either side of whole seconds t1 and t2. A daemon with `start = t1`, `end = t2` delivers
exactly phase b, commits each shard's checkpoint at the cursor of t2, and exits 0 without
being signalled; so do two such daemons sharing the work in one group, and a run over a
window with nothing in it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import pytest

from loghubd.protocol import cursor as cursors
from loghubd.testing import PortReservation
from tests.integration.daemon_harness import (
    PROJECT,
    Pool,
    assert_delivered_exactly,
    dump_toml,
    expected_ids,
    plugin_env,
    read_ids,
    wait_until,
)

pytestmark = pytest.mark.slow

N = 2_000  # logs per phase
SHARDS = 3


def next_second() -> int:
    """A whole second after every log written so far; returns once it has begun."""
    boundary = int(time.time()) + 1
    time.sleep(max(0.0, boundary - time.time()) + 0.05)
    return boundary


def write_phases(pool: Pool, logstore: str) -> tuple[int, int]:
    """Phases a, b, c; returns (t1, t2): b was received within [t1, t2), a before, c after."""
    pool.admin.create_logstore(logstore, SHARDS)
    pool.produce(logstore, count=N, group_size=50, prefix="a").wait()
    t1 = next_second()
    pool.produce(logstore, count=N, group_size=50, prefix="b").wait()
    t2 = next_second()
    pool.produce(logstore, count=N, group_size=50, prefix="c").wait()
    return t1, t2


def assert_checkpoints_at(pool: Pool, logstore: str, group: str, when: int) -> None:
    checkpoints = pool.admin.checkpoints(logstore, group)
    assert sorted(checkpoints) == list(range(SHARDS)), checkpoints
    for shard, cp in checkpoints.items():
        want = pool.admin.cursor(logstore, shard, str(when))
        assert cursors.decode(cp["checkpoint"]) == cursors.decode(want), (shard, cp, want)


def test_a_bounded_run_delivers_exactly_its_window_and_exits_0(daemon_pool: Pool) -> None:
    pool = daemon_pool
    t1, t2 = write_phases(pool, "window")
    started = time.monotonic()
    daemon = pool.daemon("window", "replay", "bounded", consumer={"start": t1, "end": t2})
    assert daemon.wait(60) == 0, daemon.log_tail()
    took = time.monotonic() - started
    assert_delivered_exactly([daemon], expected_ids("b", N))
    assert_checkpoints_at(pool, "window", "replay", t2)
    assert {e["shard"] for e in daemon.events("shard_window_end_reached")} == set(range(SHARDS))
    (complete,) = daemon.events("window_complete")
    assert (complete["logs"], complete["filtered_logs"]) == (N, 0), complete
    assert daemon.events("left_group") and not daemon.events("window_delivered_nothing")
    assert took < 30, took

    # Once more with the same group: every checkpoint is already at the end: nothing to do.
    again = pool.daemon("window", "replay", "bounded-again", consumer={"start": t1, "end": t2})
    assert again.wait(60) == 0, again.log_tail()
    assert read_ids([again.output]) == []
    (nothing,) = again.events("window_delivered_nothing")  # a cron job's green, empty run
    assert nothing["logs"] == 0 and "group reset" in nothing["hint"], nothing


def test_two_bounded_daemons_share_the_window_and_both_exit_0(daemon_pool: Pool) -> None:
    pool = daemon_pool
    t1, t2 = write_phases(pool, "shared-window")
    bounds = {"start": t1, "end": t2}
    daemons = [pool.daemon("shared-window", "pair", name, consumer=bounds) for name in ("p1", "p2")]
    for d in daemons:
        assert d.wait(60) == 0, d.log_tail()
    assert_delivered_exactly(daemons, expected_ids("b", N))
    assert_checkpoints_at(pool, "shared-window", "pair", t2)


def test_a_bounded_run_over_an_empty_window_exits_0(daemon_pool: Pool) -> None:
    pool = daemon_pool
    pool.admin.create_logstore("quiet", SHARDS)
    pool.produce("quiet", count=N, group_size=50, prefix="a").wait()
    t1 = next_second()
    t2 = next_second()  # nothing written in [t1, t2)
    pool.produce("quiet", count=N, group_size=50, prefix="c").wait()
    daemon = pool.daemon("quiet", "nothing", "empty", consumer={"start": t1, "end": t2})
    assert daemon.wait(60) == 0, daemon.log_tail()
    assert read_ids([daemon.output]) == []
    assert_checkpoints_at(pool, "quiet", "nothing", t2)


def test_a_window_ending_in_the_future_is_consumed_until_then(daemon_pool: Pool) -> None:
    """`end` still ahead: shards consume as usual, and the run stops once it has passed."""
    pool = daemon_pool
    pool.admin.create_logstore("live", SHARDS)
    pool.produce("live", count=N, group_size=50, prefix="a").wait()
    # `end` must stay ahead until the "b" logs are written: the daemon's start and a
    # `loghubd produce` process take a few seconds on a busy machine (4 s and 8 s were too short).
    end = int(time.time()) + 15
    daemon = pool.daemon("live", "until", "until", consumer={"end": end})
    daemon.wait_ready()
    pool.produce("live", count=N, group_size=50, prefix="b").wait()
    assert time.time() < end - 1, "the b logs were written too close to the window's end"
    wait_until(lambda: len(read_ids([daemon.output])) >= 2 * N, 20, daemon.log_tail)
    assert daemon.alive()
    time.sleep(max(0.0, end - time.time()) + 0.2)
    pool.produce("live", count=N, group_size=50, prefix="c").wait()
    assert daemon.wait(60) == 0, daemon.log_tail()
    assert_delivered_exactly([daemon], expected_ids("a", N) + expected_ids("b", N))


def test_a_window_starting_in_the_future_reads_nothing_written_before_it(
    daemon_pool: Pool,
) -> None:
    """`start` still ahead when the daemon starts: the shards wait for it. The service
    answers the cursor of a time with nothing after it with the shard's end, so a shard that
    looked it up at once started from the daemon's start, and exported what was written
    between then and `start` (found by the backfill audit)."""
    pool = daemon_pool
    pool.admin.create_logstore("later", SHARDS)
    start = int(time.time()) + 10  # room for the daemon's start and the "a" writes
    end = start + 8
    daemon = pool.daemon("later", "ahead", "ahead", consumer={"start": start, "end": end})
    pool.produce("later", count=500, group_size=50, prefix="a").wait()
    assert time.time() < start, "the a logs were written too late: not before the window"
    time.sleep(max(0.0, start - time.time()) + 1.2)
    pool.produce("later", count=500, group_size=50, prefix="b").wait()
    assert time.time() < end - 1, "the b logs were written too close to the window's end"
    assert daemon.wait(60) == 0, daemon.log_tail()
    assert_delivered_exactly([daemon], expected_ids("b", 500))
    assert_checkpoints_at(pool, "later", "ahead", end)
    assert {e["shard"] for e in daemon.events("shard_waiting_for_start")} == set(range(SHARDS))


def run_workers(
    pool: Pool, logstore: str, consumer: dict[str, Any], processor: dict[str, Any]
) -> tuple[int, str]:
    """`loghubd run --workers 2` over `logstore` until it exits (killed after 90 s): its exit
    code and its log. Beats, checkpoints and pulls are quick, for a short window."""
    pool.dir.mkdir(parents=True, exist_ok=True)
    ports = PortReservation(2)  # worker i listens on ports.port + i; held until we return
    config = pool.dir / f"{logstore}.toml"
    config.write_text(
        dump_toml(
            {
                "source": {"endpoint": pool.endpoint, "project": PROJECT, "logstore": logstore},
                "consumer": {"heartbeat_interval": 1.0, "timeout": 4.0,
                             "checkpoint_interval": 1.0, "fetch_interval": 0.05, **consumer},
                "processor": processor,
                "ops": {"listen": f"127.0.0.1:{ports.port}"},
                "log": {"format": "json"},
            }
        )
    )  # fmt: skip
    log_path = pool.dir / f"{logstore}.log"
    with open(log_path, "wb") as log:
        parent = subprocess.Popen(
            [sys.executable, "-m", "loghubd", "run", "-c", str(config), "--workers", "2"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **plugin_env(pool.site)},
        )
    try:
        code = parent.wait(90)
    finally:
        if parent.poll() is None:
            parent.kill()
        ports.release()
    return code, log_path.read_text()


def test_a_bounded_run_under_workers_whose_shard_fails_for_good_exits_1(
    daemon_pool: Pool,
) -> None:
    """The same under `--workers 2`: the supervisor restarted the worker that exited 1 every
    few seconds, for ever (backfill audit: 10 restarts before `timeout 150` ended it). A
    bounded run's worker that exits with an error is not restarted; the run ends with its
    code once the other has ended too."""
    pool = daemon_pool
    t1, t2 = write_phases(pool, "workers-stuck")
    code, text = run_workers(
        pool,
        "workers-stuck",
        {"group": "wstuck", "name": "ws", "start": t1, "end": t2, "max_attempts": 2,
         "on_failure": "stop", "retry_initial_backoff": 0.05},
        {"name": "flaky", "flaky": {
            "path": str(pool.dir / "wstuck-out"), "fail_id": "b100", "fail_times": 1_000,
            "attempts": str(pool.dir / "wstuck-attempts.jsonl")}},
    )  # fmt: skip
    assert code == 1, text[-3000:]
    assert "worker_restarted" not in text and '"worker_failed"' in text, text[-3000:]
    assert '"window_cannot_complete"' in text, text[-3000:]


def test_a_forced_reset_of_a_finished_shard_does_not_keep_a_bounded_run_waiting(
    daemon_pool: Pool,
) -> None:
    """`group reset --force` moved a shard that had reached its window's end back to the
    beginning while another shard still retried: the finished shard never committed again and
    the run waited for ever (backfill audit). A reset of a held shard is undone at the next
    commit tick, as README says of a live daemon, finished shards included: the run ends,
    exit 0, exactly its window."""
    pool = daemon_pool
    t1, t2 = write_phases(pool, "reset-window")
    daemon = pool.daemon(
        "reset-window",
        "rwin",
        "rwin",
        processor="flaky",
        processor_options={
            "path": str(pool.dir / "rwin-out"),
            "fail_id": "b100",
            "fail_times": 10,
            "attempts": str(pool.dir / "rwin-attempts.jsonl"),
        },
        consumer={
            "start": t1,
            "end": t2,
            "checkpoint_interval": 1.0,
            "retry_initial_backoff": 1.0,
            "processor_retry_max_backoff": 2.0,
        },
    )
    failing = wait_until(lambda: daemon.events("process_failed"), 30, daemon.log_tail)[0]["shard"]
    done = wait_until(
        lambda: [e["shard"] for e in daemon.events("shard_window_end_reached")
                 if e["shard"] != failing],
        30,
        daemon.log_tail,
    )[0]  # fmt: skip
    reset = subprocess.run(
        [sys.executable, "-m", "loghubd", "group", "reset", "rwin", "--endpoint", pool.endpoint,
         "--project", PROJECT, "--logstore", "reset-window", "--shards", str(done),
         "--to", "begin", "--execute", "--force"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert reset.returncode == 0, reset.stdout + reset.stderr
    assert not daemon.events("window_complete"), "the reset came too late to test anything"
    assert daemon.wait(90) == 0, daemon.log_tail()
    assert daemon.events("checkpoint_reset_while_held"), daemon.log_tail()
    delivered = read_ids([pool.dir / "rwin-out"])
    assert sorted(delivered) == sorted(expected_ids("b", N)), "not exactly the window, once"
    assert_checkpoints_at(pool, "reset-window", "rwin", t2)


def test_a_bounded_run_whose_shard_fails_for_good_exits_1_instead_of_waiting(
    daemon_pool: Pool,
) -> None:
    """A shard whose processor gave up (`on_failure = "stop"`) never reaches the window's
    end: once every other shard has, the run says so and exits 1 (found by the backfill
    audit: a cron job waited for ever)."""
    pool = daemon_pool
    t1, t2 = write_phases(pool, "stuck-window")
    daemon = pool.daemon(
        "stuck-window",
        "stuck",
        "stuck",
        processor="flaky",
        processor_options={
            "path": str(pool.dir / "flaky-out"),
            "fail_id": "b100",
            "fail_times": 1_000,
            "attempts": str(pool.dir / "attempts.jsonl"),
        },
        consumer={
            "start": t1,
            "end": t2,
            "max_attempts": 2,
            "on_failure": "stop",
            "retry_initial_backoff": 0.05,
        },
    )
    assert daemon.wait(60) == 1, daemon.log_tail()
    (event,) = daemon.events("window_cannot_complete")
    parked = {e["shard"] for e in daemon.events("shard_parked")}
    assert event["failed_shards"] == sorted(parked) and len(parked) == 1, event
    delivered = read_ids([pool.dir / "flaky-out"])
    assert "b100" not in delivered and set(delivered) <= set(expected_ids("b", N))


def test_a_shard_filter_naming_shards_the_logstore_lacks_is_said(daemon_pool: Pool) -> None:
    """`consumer.shards = [9]` on a 3-shard logstore: a bounded run would read nothing and
    end 0 (backfill audit), so it is refused, exit 3; with one shard that exists, the
    others are a warning and the run goes on."""
    pool = daemon_pool
    pool.admin.create_logstore("filtered", SHARDS)
    end = next_second()
    nothing = pool.daemon("filtered", "f1", "f1", consumer={"end": end, "shards": [9]})
    assert nothing.wait(60) == 3, nothing.log_tail()
    assert (
        "loghubd run: cannot start: consumer.shards: no shard 9 in logstore filtered (it has "
        "0, 1, 2): this bounded run would read nothing"
    ) in nothing.log_path.read_text(), nothing.log_tail()
    some = pool.daemon("filtered", "f2", "f2", consumer={"end": end, "shards": [0, 9]})
    assert some.wait(60) == 0, some.log_tail()
    (warned,) = some.events("shards_not_in_logstore")
    assert warned["shards"] == [9] and warned["logstore_shards"] == [0, 1, 2], warned


def test_a_bounded_parquet_run_writes_at_its_window_end_not_at_max_age(
    daemon_pool: Pool,
) -> None:
    """`parquet` buffers rows until a file rolls (`max_age_s`, 60 s by default). A shard at
    its window's end gets no more batches: its processor is shut down there and writes them,
    and the run exits without waiting out the age (found by the backfill audit: 65 s for a
    window read in half a second). DuckDB reads exactly phase b."""
    from tests.integration.test_parquet_sink import duck

    pool = daemon_pool
    t1, t2 = write_phases(pool, "lake-window")
    out = pool.dir / "lake"
    daemon = pool.daemon(
        "lake-window",
        "lake",
        "lake",
        processor="parquet",
        processor_options={"path": str(out), "max_age_s": 600},
        consumer={"start": t1, "end": t2},
    )
    assert daemon.wait(60) == 0, daemon.log_tail()
    assert {e["reason"] for e in daemon.events("parquet_written")} == {"shutdown"}
    ids = duck(out, "SELECT count(*), count(DISTINCT id) FROM logs")[0]
    assert ids == (N, N), ids
    assert sorted(r[0] for r in duck(out, "SELECT DISTINCT id FROM logs")) == sorted(
        expected_ids("b", N)
    )


def test_a_bounded_run_under_workers_ends_when_every_worker_has(daemon_pool: Pool) -> None:
    """`--workers 2` over a window: each worker exits 0 at its end, and the supervisor, which
    would restart a worker that exits, lets them finish and exits 0 itself."""
    pool = daemon_pool
    t1, t2 = write_phases(pool, "workers-window")
    out = pool.dir / "workers-out"
    code, text = run_workers(
        pool,
        "workers-window",
        {"group": "wpair", "name": "w", "start": t1, "end": t2},
        {"name": "jsonl", "jsonl": {"path": str(out)}},
    )
    assert code == 0, text[-3000:]
    assert "worker_restarted" not in text and text.count('"worker_finished"') == 2, text[-3000:]
    assert sorted(read_ids([out])) == sorted(expected_ids("b", N))
    assert_checkpoints_at(pool, "workers-window", "wpair", t2)
