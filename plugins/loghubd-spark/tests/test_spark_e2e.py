"""End to end with real processes: `loghubd serve`, `loghubd produce`, `loghubd run` with
`processor = "spark"`; outputs read back with Spark.

- 200,000 logs over 4 shards through a SQL pipeline (filter + a new column): exactly the
  expected rows, partitioned by date, while heartbeats stay on time (100,000-row writes); a
  real Prometheus scraping the daemon answers every Grafana dashboard target on the spark
  series;
- `kill -9` of the daemon at every stage of a write and at random moments: no loss, no
  duplicate;
- a Python-function pipeline into the JSON-lines sink, with a crash: the same;
- the daemon's Spark JVM killed (as the OOM killer would): a new session takes over, the
  daemon keeps running, and the output is still exact.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from spark_harness import Source, SparkDaemon, produce, wait_until
from spark_pipelines import SLOW_FLAG

from loghubd.protocol import pb
from loghubd.testing import ServerProcess
from tests.integration.prometheus import Prometheus, expand, panel_queries, spark_query

pytestmark = [pytest.mark.spark, pytest.mark.slow]

LEVELS = ("INFO", "INFO", "INFO", "WARN", "ERROR")


def children(pid: int) -> list[int]:
    """Processes whose parent is `pid` (the daemon's JVM)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def gone(pids: list[int]) -> bool:
    """None of these processes runs any more (exited, or a zombie waiting to be reaped)."""
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            return False
    return True


def read_ids(spark: Any, path: Path, fmt: str = "parquet") -> Counter[int]:
    df = spark.read.format(fmt).load(str(path))
    return Counter(int(r[0]) for r in df.selectExpr("CAST(contents['id'] AS BIGINT)").collect())


def _check_spark_panels(prom: Prometheus, after: float) -> None:
    """Every dashboard target on the spark plugin's series returns a series, once the daemon
    was scraped twice after its writes (rate() needs two samples)."""
    targets = [(title, expr) for title, expr in panel_queries() if spark_query(expr)]
    assert len(targets) >= 3, targets  # output, latency, failures

    def scraped_since() -> bool:
        stamps = prom.query("timestamp(up)") if prom.ready() else []
        return len(stamps) == 1 and float(stamps[0]["value"][1]) > after + 2.5

    wait_until(scraped_since, 60, lambda: prom.log.read_text()[-3000:])
    empty = [f"{title}: {expr}" for title, expr in targets if not prom.query(expand(expr))]
    assert not empty, "spark panels without data:\n" + "\n".join(empty)


def assert_exactly(ids: Counter[int], expected: set[int]) -> None:
    dups = sorted(i for i, n in ids.items() if n > 1)
    missing = sorted(expected - set(ids))
    extra = sorted(set(ids) - expected)
    assert not dups, f"{len(dups)} duplicated ids, e.g. {dups[:10]}"
    assert not missing, f"{len(missing)} missing ids, e.g. {missing[:10]}"
    assert not extra, f"{len(extra)} unexpected ids, e.g. {extra[:10]}"


@pytest.mark.timeout(400)
def test_200k_logs_through_a_sql_pipeline_exactly_and_on_time(
    spark: Any, loghubd_server: ServerProcess, tmp_path: Path
) -> None:
    server = loghubd_server
    total = 200_000
    producer = produce(server.endpoint, "sparke2e", "app", total, shards=4, wait=False)
    wait_until(lambda: _logstore_exists(server.endpoint), 30)
    out = tmp_path / "out"
    daemon = SparkDaemon(
        tmp_path / "daemon",
        server.endpoint,
        "sparke2e",
        "app",
        {
            "path": str(out),
            "sql": "SELECT *, CAST(contents['id'] AS BIGINT) AS id, "
            "lower(contents['level']) AS level FROM {logs} WHERE contents['level'] <> 'ERROR'",
        },
    ).start()
    prom: Prometheus | None = None
    try:
        daemon.wait_ready(120)
        # The Grafana dashboard's spark targets, against this daemon (test_dashboard.py runs
        # the others against a daemon without a JVM).
        prom = Prometheus(tmp_path / "prometheus", {"loghubd": f"127.0.0.1:{daemon.port}"})
        assert producer.wait(300)["written"] == total
        source = Source(server.endpoint, "sparke2e", "app")
        wait_until(
            lambda: source.caught_up(daemon.group),
            300,
            lambda: f"not caught up: {daemon.log_tail()}",
        )
        worst = daemon.metric("loghubd_heartbeat_delay_max_seconds")
        beats = daemon.metric("loghubd_heartbeat_duration_seconds_count")
        _check_spark_panels(prom, time.time())
        assert daemon.stop() == 0, daemon.log_tail()
    finally:
        daemon.kill()
        if prom is not None:
            prom.stop()
    writes = list(daemon.events("spark_batch_written"))
    assert sum(w["rows"] for w in writes) == total  # rows into the pipeline
    assert max(w["rows"] for w in writes) >= 100_000  # writes of 100,000 rows (max_rows)
    assert any(len(w["shards"]) > 1 for w in writes)  # one write covers several shards
    # Acceptance 4: the event loop stayed responsive while those were converted and written.
    assert beats is not None and beats >= 10
    assert worst is not None and worst < 1.0, f"a heartbeat was {worst:.2f}s late"

    df = spark.read.parquet(str(out))
    expected = [n for n in range(total) if LEVELS[n % 5] != "ERROR"]
    row = df.selectExpr(
        "count(*) AS n",
        "count(DISTINCT id) AS distinct_ids",
        "sum(id) AS s1",
        "sum(id * id) AS s2",
        "sum(CASE WHEN level = lower(contents['level']) THEN 0 ELSE 1 END) AS bad_level",
        "sum(CASE WHEN dt = to_date(__time__) THEN 0 ELSE 1 END) AS bad_dt",
    ).collect()[0]
    assert row["n"] == row["distinct_ids"] == len(expected)
    assert (row["s1"], row["s2"]) == (sum(expected), sum(n * n for n in expected))
    assert row["bad_level"] == 0 and row["bad_dt"] == 0
    assert set(df.columns) >= {"__time__", "contents", "shard", "cursor", "id", "level"}
    # Partitioned by date (then by write): dt=YYYY-MM-DD/batch=<write-ahead entry>.
    parts = {p.relative_to(out).parts[:2] for p in out.glob("dt=*/batch=*/*.parquet")}
    entries = {p.stem for p in (out / "_loghubd_wal").glob("*.json")}
    assert {batch.removeprefix("batch=") for _, batch in parts} <= entries
    assert all(dt.startswith("dt=20") and len(dt) == len("dt=2025-01-01") for dt, _ in parts)


@pytest.mark.timeout(600)
def test_kill_9_at_any_point_loses_nothing_and_duplicates_nothing(
    spark: Any, loghubd_server: ServerProcess, tmp_path: Path
) -> None:
    """Five crashes, each followed by a restart: after the write-ahead entry, after the sink
    write, after the entry's commit (before the ack/checkpoint), and twice with `kill -9` at a
    random moment while writes are going on. Then a clean run drains the rest."""
    server = loghubd_server
    seed = int(os.environ.get("LOGHUBD_SPARK_TEST_SEED", time.time_ns() % 10**6))
    rnd = random.Random(seed)
    produced = 30_000
    produce(server.endpoint, "sparkcrash", "app", produced, shards=4)
    out = tmp_path / "out"
    daemon = SparkDaemon(
        tmp_path / "daemon",
        server.endpoint,
        "sparkcrash",
        "app",
        {"path": str(out), "max_rows": 2500, "max_delay": 1.0},
        consumer={"max_fetch_log_groups": 10},
    )
    source = Source(server.endpoint, "sparkcrash", "app")
    crashes = [("wal_written", 2), ("sink_written", 2), ("wal_committed", 2), None, None]
    try:
        for crash in crashes:
            before = daemon.count("spark_batch_written")
            if crash is None:
                produce(server.endpoint, "sparkcrash", "app", 6000, start=produced)
                produced += 6000
                daemon.start()
                wait_until(
                    lambda b=before: daemon.count("spark_batch_written") > b,  # type: ignore[misc]
                    120,
                    lambda: f"no write in this run: {daemon.log_tail()}",
                )
                time.sleep(rnd.uniform(0.0, 1.5))
                jvms = children(daemon.proc.pid) if daemon.proc else []
                daemon.kill()
                assert daemon.proc is not None and daemon.proc.returncode == -signal.SIGKILL
            else:
                stage, nth = crash
                daemon.start(
                    {
                        "LOGHUBD_SPARK_CRASH_AFTER": stage,
                        "LOGHUBD_SPARK_CRASH_AFTER_COUNT": str(nth),
                    }
                )
                assert daemon.proc is not None
                pid = daemon.proc.pid
                jvms = wait_until(lambda p=pid: children(p), 60, "no JVM")  # type: ignore[misc]
                assert daemon.wait_exit(180) == 137, daemon.log_tail()
            assert jvms, "the daemon had no JVM child?"
            wait_until(lambda j=jvms: gone(j), 60, "the JVM outlived its daemon")  # type: ignore[misc]
            ids = read_ids(spark, out)
            assert max(ids.values(), default=1) == 1, (
                f"duplicates after crash {crash} (seed {seed})"
            )
        daemon.start()
        daemon.wait_ready(120)
        wait_until(
            lambda: source.caught_up(daemon.group), 240, lambda: f"stuck: {daemon.log_tail()}"
        )
        assert daemon.stop() == 0, daemon.log_tail()
    finally:
        daemon.kill()
    assert daemon.count("spark_batch_recovered") >= 2  # wal_written, sink_written, random
    # After the wal_committed crash the daemon re-delivered data already in the sink.
    assert daemon.count("spark_already_written") >= 1
    assert_exactly(read_ids(spark, out), set(range(produced)))
    import json

    states = {json.loads(p.read_text())["state"] for p in (out / "_loghubd_wal").glob("*.json")}
    assert states <= {"committed"}


@pytest.mark.timeout(300)
def test_function_pipeline_into_json_lines_survives_a_crash(
    spark: Any, loghubd_server: ServerProcess, tmp_path: Path
) -> None:
    server = loghubd_server
    total = 10_000
    produce(server.endpoint, "sparkfn", "app", total, shards=2)
    out = tmp_path / "out"
    daemon = SparkDaemon(
        tmp_path / "daemon",
        server.endpoint,
        "sparkfn",
        "app",
        {
            "path": str(out),
            "function": "spark_pipelines:tag_levels",
            "sink": "jsonl",
            "max_rows": 2000,
        },
        consumer={"max_fetch_log_groups": 10},
    )
    source = Source(server.endpoint, "sparkfn", "app")
    try:
        daemon.start(
            {"LOGHUBD_SPARK_CRASH_AFTER": "sink_written", "LOGHUBD_SPARK_CRASH_AFTER_COUNT": "2"}
        )
        assert daemon.wait_exit(180) == 137, daemon.log_tail()
        daemon.start()
        daemon.wait_ready(120)
        wait_until(lambda: source.caught_up(daemon.group), 180, lambda: daemon.log_tail())
        assert daemon.stop() == 0, daemon.log_tail()
    finally:
        daemon.kill()
    assert daemon.count("spark_batch_recovered") == 1
    # Spark's log4j console lines stay out of the JSON output (the quiet profile), and the
    # timer thread's writes carry the daemon's `source` like every other event
    assert not daemon.foreign_lines(), daemon.foreign_lines()[:20]
    written = list(daemon.events("spark_batch_written"))
    assert written and all(e.get("source") == "default" for e in written), written[:3]
    files = list(out.glob("dt=*/batch=*/part-*.json"))
    assert files, "no JSON-lines files"
    df = spark.read.json(str(out))
    rows = df.select("id", "msg_len", "dt").collect()
    assert_exactly(Counter(r["id"] for r in rows), {n for n in range(total) if n % 5 in (3, 4)})
    assert all(r["msg_len"] == len(f"synthetic log {r['id']}") for r in rows)


def _logstore_exists(endpoint: str) -> bool:
    try:
        return bool(Source(endpoint, "sparke2e", "app").shard_ids())
    except Exception:
        return False


def test_a_killed_spark_jvm_is_replaced_and_the_output_stays_exact(
    spark: Any, loghubd_server: ServerProcess, tmp_path: Path
) -> None:
    server = loghubd_server
    first, total = 4_000, 8_000
    produce(server.endpoint, "sparkjvm", "app", first, shards=2)
    out = tmp_path / "out"
    daemon = SparkDaemon(
        tmp_path / "daemon",
        server.endpoint,
        "sparkjvm",
        "app",
        {"path": str(out), "max_rows": 1000, "max_delay": 0.5},
        consumer={"max_fetch_log_groups": 5},
    )
    source = Source(server.endpoint, "sparkjvm", "app")
    try:
        daemon.start().wait_ready(120)
        assert daemon.proc is not None
        wait_until(lambda: daemon.count("spark_batch_written") >= 1, 60, daemon.log_tail)
        jvms = [p for p in children(daemon.proc.pid) if "java" in _cmdline(p)]
        assert len(jvms) == 1, jvms
        os.kill(jvms[0], signal.SIGKILL)
        wait_until(lambda: gone(jvms), 10)
        produce(server.endpoint, "sparkjvm", "app", total - first, start=first)
        wait_until(lambda: source.caught_up(daemon.group), 90, daemon.log_tail)
        assert daemon.alive, daemon.log_tail()
        assert daemon.count("spark_session_restarted") == 1, daemon.log_tail()
        new = [p for p in children(daemon.proc.pid) if "java" in _cmdline(p)]
        assert len(new) == 1 and new != jvms, new
        assert daemon.stop() == 0, daemon.log_tail()
    finally:
        daemon.kill()
    assert_exactly(read_ids(spark, out), set(range(total)))


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@pytest.mark.timeout(600)
def test_one_bad_log_is_dead_lettered_alone_and_every_other_log_is_written_once(
    spark: Any, loghubd_server: ServerProcess, tmp_path: Path
) -> None:
    """A SQL pipeline that fails on one log (division by zero) with on_failure =
    "dead_letter": the failed write is split into one write per daemon batch, so exactly the
    batch holding that log is dead-lettered, every other log is in the sink once, and every
    shard's checkpoint reaches the end (nothing keeps failing in other batches' process())."""
    server = loghubd_server
    total = 2000
    produce(server.endpoint, "sparkdl", "app", total, shards=2, group_size=50)
    out, dead_letters = tmp_path / "out", tmp_path / "dead-letter"
    daemon = SparkDaemon(
        tmp_path / "daemon",
        server.endpoint,
        "sparkdl",
        "app",
        {
            "path": str(out),
            "master": "local[1]",
            "max_rows": 300,
            "max_delay": 1.0,
            "convert_processes": 0,
            "sql": "SELECT *, 1 / (CAST(contents['id'] AS INT) - 150) AS x FROM {logs}",
        },
        consumer={
            "max_attempts": 3,
            "on_failure": "dead_letter",
            "dead_letter_dir": str(dead_letters),
            "max_fetch_log_groups": 2,
        },
    )
    source = Source(server.endpoint, "sparkdl", "app")
    try:
        daemon.start().wait_ready(120)
        wait_until(lambda: source.caught_up(daemon.group), 240, daemon.log_tail)
        assert daemon.stop() == 0, daemon.log_tail()
    finally:
        daemon.kill()
    notes = sorted(dead_letters.rglob("*.json"))
    assert len(notes) == 1, notes
    assert daemon.count("batch_dead_lettered") == 1
    note = json.loads(notes[0].read_text())
    groups = pb.LogGroupList()
    groups.ParseFromString((notes[0].parent / note["data"]).read_bytes())
    dead = {
        int(c.Value)
        for g in groups.LogGroups
        for entry in g.Logs
        for c in entry.Contents
        if c.Key == "id"
    }
    assert 150 in dead and len(dead) <= 100, sorted(dead)  # one fetch: at most 2 groups
    assert_exactly(read_ids(spark, out), set(range(total)) - dead)
    states = {json.loads(p.read_text())["state"] for p in (out / "_loghubd_wal").glob("*.json")}
    assert states == {"committed"}


# The shard's shutdown budget (`shutdown_budget`, README "Shutdown / rebalance"; short here)
# plus what the daemon's stop adds around it: leaving the group, stopping Spark. A write left
# to run would hold the stop for write_timeout (600 s); the held write below lasts 10 minutes.
SHUTDOWN_BUDGET_S = 4.0
STOP_BOUND_S = 40


@pytest.mark.timeout(600)
def test_sigterm_during_a_slow_write_stops_within_the_shutdown_budget_and_loses_nothing(
    spark: Any, loghubd_server: ServerProcess, tmp_path: Path
) -> None:
    server = loghubd_server
    total = 1000
    produce(server.endpoint, "sparkterm", "app", total, shards=2, group_size=50)
    out, flag = tmp_path / "out", tmp_path / "slow"
    flag.touch()
    daemon = SparkDaemon(
        tmp_path / "daemon",
        server.endpoint,
        "sparkterm",
        "app",
        {
            "path": str(out),
            "master": "local[1]",
            "max_delay": 1.0,
            "convert_processes": 0,
            "function": "spark_pipelines:slow_while_flagged",
            "shutdown_budget": SHUTDOWN_BUDGET_S,
        },
    )
    source = Source(server.endpoint, "sparkterm", "app")
    env = {SLOW_FLAG: str(flag)}
    try:
        daemon.start(env).wait_ready(120)
        sleeping = Path(f"{flag}.sleeping")
        wait_until(sleeping.exists, 120, daemon.log_tail)  # the write is held in the UDF
        assert daemon.proc is not None
        daemon.proc.send_signal(signal.SIGTERM)
        try:
            daemon.wait_exit(STOP_BOUND_S)
        except Exception as exc:
            raise AssertionError(
                f"the daemon did not stop within {STOP_BOUND_S}s: {daemon.log_tail()}"
            ) from exc
        assert daemon.count("spark_write_cancelled_for_shutdown") >= 1, daemon.log_tail()
        assert daemon.count("spark_batch_written") == 0, daemon.log_tail()
        flag.unlink()
        daemon.start(env).wait_ready(120)
        wait_until(lambda: source.caught_up(daemon.group), 180, daemon.log_tail)
        assert daemon.stop() == 0, daemon.log_tail()
    finally:
        daemon.kill()
    assert_exactly(read_ids(spark, out), set(range(total)))
