"""The `parquet` processor through real daemons, read back by DuckDB (an independent reader).

Acceptance: three daemons on 8 shards consume 300,000 logs written while they run; one is
`kill -9`'d twice and restarted, one is stopped with SIGTERM mid-stream. DuckDB then counts
exactly 300,000 rows and 300,000 distinct ids over `**/*.parquet`; every file sits in the
partition its rows' time says (`{logstore}/dt=.../hour=.../`); no temporary file is left
visible. Also: bad options and an unwritable path stop the daemon at start, naming the key.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.parquet as pq
import pytest

from tests.integration.daemon_harness import Daemon, Pool, wait_until

pytestmark = pytest.mark.slow

LOGSTORE = "lake"
GROUP = "lake-group"
COUNT = 300_000
SHARDS = 8


def duck(out: Path, sql: str) -> Any:
    """One DuckDB query over every visible Parquet file under `out` (as table `logs`)."""
    con = duckdb.connect()
    try:
        con.execute("SET TimeZone = 'UTC'")
        files = f"{out}/**/*.parquet"
        con.execute(
            "CREATE VIEW logs AS SELECT *, filename AS file FROM read_parquet("
            f"'{files}', union_by_name = true, hive_partitioning = true, filename = true)"
        )
        return con.execute(sql).fetchall()
    finally:
        con.close()


def rows(out: Path) -> int:
    if not any(out.rglob("*.parquet")):
        return 0
    return int(duck(out, "SELECT count(*) FROM logs")[0][0])


@pytest.mark.timeout(400)  # ~40 s on an idle machine; a loaded one is far slower
def test_exactly_once_through_kills_and_sigterm(daemon_pool: Pool) -> None:
    pool = daemon_pool
    out = pool.dir / "lake"
    pool.admin.create_logstore(LOGSTORE, SHARDS)
    # As fast as it goes, while the daemons consume: the crashes come mid-stream.
    producer = pool.produce(LOGSTORE, count=COUNT, group_size=100, prefix="q")
    options = {"path": str(out), "max_rows": 20_000, "max_age_s": 1.0}

    def daemon(name: str) -> Daemon:
        return pool.daemon(
            LOGSTORE,
            GROUP,
            name,
            processor="parquet",
            processor_options=options,
            consumer={"max_fetch_log_groups": 50},
        )

    a, b, c = daemon("a"), daemon("b"), daemon("c")
    for d in (a, b, c):
        d.wait_ready()

    def past(n: int) -> None:
        wait_until(lambda: rows(out) >= n, 60, lambda: f"{rows(out)} < {n}\n{a.log_tail()}")

    past(COUNT // 10)
    a.kill()  # kill -9, mid-write for some of its shards
    a = daemon("a").wait_ready()
    past(COUNT // 3)
    b.signal(15)  # SIGTERM: writes what it buffered, hands its shards over, exits 0
    assert b.wait(30) == 0, b.log_tail()
    past(COUNT // 2)
    a.kill()
    a = daemon("a").wait_ready()

    producer.wait(300)
    wait_until(lambda: rows(out) >= COUNT, 120, lambda: f"{rows(out)}\n{c.log_tail()}")
    for d in (a, c):
        assert d.stop() == 0, d.log_tail()

    total, distinct = duck(out, "SELECT count(*), count(DISTINCT id) FROM logs")[0]
    assert (total, distinct) == (COUNT, COUNT)
    # Partitions as configured: {logstore}/dt=<date>/hour=<hour>/, the rows' own UTC time.
    misplaced = duck(
        out,
        "SELECT count(*) FROM logs WHERE strftime(__time__, '%Y-%m-%d') <> CAST(dt AS VARCHAR)"
        " OR strftime(__time__, '%H') <> lpad(CAST(hour AS VARCHAR), 2, '0')",
    )[0][0]
    assert misplaced == 0
    for path in out.rglob("*.parquet"):
        rel = path.relative_to(out).parts
        assert rel[0] == LOGSTORE and rel[1].startswith("dt=") and rel[2].startswith("hour=")
        assert len(rel) == 4 and rel[3].startswith("part-"), rel
    # No temporary file left visible (the write-ahead log's directory is the sink's own).
    leftovers = [
        p for p in out.rglob("*") if p.is_file() and "_loghubd_wal" not in p.parts
        and not p.name.endswith(".parquet")
    ]  # fmt: skip
    assert leftovers == []
    # The crashes did leave writes to finish or discard, or nothing was in flight; either
    # way the daemons said what they recovered (visible in their logs when it happened).
    assert sum(len(d.events("parquet_written")) for d in pool.daemons) > 0


@pytest.mark.timeout(120)
def test_list_options_from_the_config_file(daemon_pool: Pool) -> None:
    """`fields` and `statistics` are TOML arrays: they reach the processor from a real config
    file (the config layer freezes arrays into tuples; `fields` was once refused for it)."""
    pool = daemon_pool
    out = pool.dir / "listed"
    pool.admin.create_logstore("listed", 2)
    count = 1_000
    d = pool.daemon(
        "listed",
        "listed-group",
        "solo",
        processor="parquet",
        processor_options={
            "path": str(out),
            "max_age_s": 0.5,
            "fields": ["id", "absent"],
            "statistics": ["__time__", "id"],
        },
    ).wait_ready()
    pool.produce("listed", count=count, group_size=100, prefix="l").wait(60)
    wait_until(lambda: rows(out) >= count, 60, lambda: f"{rows(out)}\n{d.log_tail()}")
    # The processor's own series on /metrics (docs/metrics.md), with the source label.
    files = list(out.rglob("*.parquet"))
    text = d.metrics()
    assert 'loghubd_parquet_written_rows_total{source="default"} 1000.0' in text, text
    assert d.metric("loghubd_parquet_written_files_total") == len(files)
    assert d.metric("loghubd_parquet_write_duration_seconds_count") >= 1
    assert d.metric("loghubd_parquet_buffered_bytes") == 0  # everything written
    # Written by the age timer's thread, logged in the source's context like the loop's lines.
    aged = [e for e in d.events("parquet_written") if e.get("reason") == "max_age"]
    assert aged, d.log_tail()
    for event in aged:
        assert (event.get("source"), event.get("group"), event.get("consumer")) == (
            "default",
            "listed-group",
            "solo",
        ), event
    for reason in ("max_rows", "max_bytes", "max_age", "max_buffered_bytes", "shutdown"):
        assert (
            f'loghubd_parquet_write_failures_total{{reason="{reason}",source="default"}} 0.0'
            in text
        )
    assert d.stop() == 0, d.log_tail()
    assert duck(out, "SELECT count(DISTINCT id), count(absent) FROM logs")[0] == (count, 0)
    for path in out.rglob("*.parquet"):
        columns = pq.read_schema(path).names
        assert columns[-2:] == ["id", "absent"], columns  # the listed fields, nothing else
        group = pq.read_metadata(path).row_group(0)
        stats = {
            group.column(i).path_in_schema
            for i in range(group.num_columns)
            if group.column(i).is_stats_set and group.column(i).statistics.has_min_max
        }
        assert stats == {"__time__", "id"}, (path, stats)


def _run(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loghubd", "run", "-c", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ('path = "/etc/hostname/lake"', "processor.parquet.path: cannot write to"),
        ('path = "/tmp/x"\ncompression = "lzma"', "processor.parquet.compression: 'lzma'"),
        ('path = "/tmp/x"\npartition = "{a!r}/"', "processor.parquet.partition:"),
        ('path = "s3://bucket/x"', "processor.parquet."),
        ('path = "/tmp/x"\nmax_rows = 0', "processor.parquet.max_rows: must be >= 1"),
        (
            'path = "/tmp/x"\ncompression = "snappy"\ncompression_level = 3',
            "processor.parquet.compression_level: snappy does not take level 3",
        ),
        (
            'path = "/tmp/x"\ncompression_level = 100',
            "processor.parquet.compression_level: zstd takes a level from",
        ),
    ],
)
def test_bad_configuration_stops_the_daemon(tmp_path: Path, options: str, message: str) -> None:
    config = tmp_path / "loghubd.toml"
    config.write_text(
        '[source]\nendpoint = "http://127.0.0.1:1"\nproject = "proj"\nlogstore = "logs"\n'
        '[consumer]\ngroup = "grp"\n'
        f'[processor]\nname = "parquet"\n[processor.parquet]\n{options}\n'
    )
    started = time.monotonic()
    out = _run(config)
    assert out.returncode == 2, out
    assert message in out.stderr + out.stdout, out
    assert "Traceback" not in out.stderr + out.stdout
    assert time.monotonic() - started < 30


@pytest.mark.timeout(120)
def test_a_long_held_shard_keeps_its_write_ahead_log_short(daemon_pool: Pool) -> None:
    """Each checkpoint commit deletes the write-ahead entries behind it (the `committed`
    hook): a daemon that never loses its shards does not grow the log by one entry per file."""
    pool = daemon_pool
    out = pool.dir / "held"
    wal = out / "_loghubd_wal"
    pool.admin.create_logstore("held", 2)
    count = 4_000
    d = pool.daemon(
        "held",
        "held-group",
        "solo",
        processor="parquet",
        processor_options={"path": str(out), "max_rows": 200, "max_age_s": 0.5},
        consumer={"max_fetch_log_groups": 2, "checkpoint_interval": 1.0},
    ).wait_ready()
    pool.produce("held", count=count, group_size=100, prefix="h").wait(60)
    wait_until(lambda: rows(out) >= count, 60, lambda: f"{rows(out)}\n{d.log_tail()}")
    files = list(out.rglob("*.parquet"))
    assert len(files) >= 10, files  # many writes, so many entries were made
    # Still running, still holding both shards: every entry is behind a commit by now.
    wait_until(
        lambda: not list(wal.glob("*.json")),
        30,
        lambda: f"{sorted(p.name for p in wal.glob('*.json'))}\n{d.log_tail()}",
    )
    assert d.events("processor_committed_hook_failed") == []
    assert d.stop() == 0, d.log_tail()
    assert duck(out, "SELECT count(*), count(DISTINCT id) FROM logs")[0] == (count, count)


@pytest.mark.timeout(180)
def test_a_paused_former_owner_writes_nothing_twice(daemon_pool: Pool) -> None:
    """A buffers the shard's logs and is SIGSTOPped past the group timeout; B takes the
    shard, writes the logs, commits its checkpoint and deletes its write-ahead entries. A is
    continued, finds it lost the shard, and its shutdown of the shard writes its buffer:
    the floor B's collection recorded makes that write empty."""
    import signal

    pool = daemon_pool
    out = pool.dir / "paused"
    count = 1000
    pool.admin.create_logstore("paused", 1)

    def daemon(name: str, max_age_s: float) -> Daemon:
        return pool.daemon(
            "paused",
            "paused-group",
            name,
            processor="parquet",
            processor_options={"path": str(out), "max_age_s": max_age_s},
        )

    a = daemon("a", 3600.0).wait_ready()
    wait_until(lambda: a.held() == {0}, 20, a.log_tail)
    pool.produce("paused", count=count, group_size=100, prefix="p").wait(60)
    wait_until(lambda: a.metric("loghubd_parquet_buffered_bytes") > 0, 20, a.log_tail)
    a.signal(signal.SIGSTOP)
    try:
        b = daemon("b", 0.5).wait_ready()
        wait_until(lambda: rows(out) >= count, 60, b.log_tail)
        wal = out / "_loghubd_wal"
        wait_until(lambda: not list(wal.glob("*.json")), 30, b.log_tail)  # collected
    finally:
        a.signal(signal.SIGCONT)
    wait_until(
        lambda: any(e.get("lost") for e in a.events("shard_stopped")),
        60,
        a.log_tail,
    )
    shutdown = [e for e in a.events("parquet_written") if e.get("reason") == "shutdown"]
    assert [e.get("rows") for e in shutdown] == [0], shutdown
    assert duck(out, "SELECT count(*), count(DISTINCT id) FROM logs")[0] == (count, count)
    assert b.stop() == 0 and a.stop() == 0
