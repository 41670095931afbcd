"""The engine in-process, on the shared SparkSession: buffering, acks after commit, failures,
replays (exactly once), recovery of a crashed write, cancellation, the sinks."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import structlog
from loghubd_spark import jobs
from loghubd_spark.engine import Engine
from loghubd_spark.options import SparkOptions
from loghubd_spark.plugin import SparkFactory, SparkProcessor
from loghubd_spark.runner import SparkError, SparkRunner, SparkTimeout, explain
from spark_harness import Source, produce, wait_until
from spark_pipelines import FAIL_FLAG

from loghubd.arrow import convert
from loghubd.models import Batch
from loghubd.plugins.api import ProcessorContext
from loghubd.protocol import cursor as cursors
from loghubd.protocol import pb
from loghubd.testing import ServerProcess, make_context
from loghubd.wal import COMMITTED, Entry, Range

pytestmark = pytest.mark.spark

LEVELS = ("INFO", "INFO", "INFO", "WARN", "ERROR")


class FakeAck:
    def __init__(self) -> None:
        self.calls = 0
        self.persist = False

    def done(self, persist: bool = False) -> None:
        self.calls += 1
        self.persist = self.persist or persist


class FakeTracker:
    """What a processor sees: `defer()` hands out acks (all recorded)."""

    def __init__(self) -> None:
        self.acks: list[FakeAck] = []

    def defer(self) -> FakeAck:
        ack = FakeAck()
        self.acks.append(ack)
        return ack

    def save_checkpoint(self, persist: bool = True) -> None:
        raise AssertionError("the spark processor acks through defer(), never save_checkpoint")

    def get_checkpoint(self) -> str:
        return ""


def make_batch(shard: int, seq: int, groups: int, per_group: int, first_id: int) -> Batch:
    lgl = pb.LogGroupList()
    n = first_id
    for _ in range(groups):
        group = lgl.LogGroups.add(Topic="t", Source="s")
        for _ in range(per_group):
            log = group.Logs.add(Time=1_700_000_000 + n % 100_000)
            log.Contents.add(Key="id", Value=str(n))
            log.Contents.add(Key="level", Value=LEVELS[n % 5])
            log.Contents.add(Key="msg", Value=f"synthetic log {n}")
            n += 1
    return Batch(
        shard,
        cursors.from_seq(shard, seq),
        cursors.from_seq(shard, seq + groups),
        lgl.SerializeToString(),
        groups,
    )


@pytest.fixture
def engines(spark: Any, tmp_path: Path) -> Iterator[Callable[..., Engine]]:
    made: list[Engine] = []

    def make(
        *, context: ProcessorContext | None = None, timer: bool = False, **options: Any
    ) -> Engine:
        opts = SparkOptions.parse({"path": str(tmp_path / "out"), "master": "local[1]", **options})
        engine = Engine(opts, SparkRunner(opts.master, opts.conf, session=spark), context=context)
        engine.start(timer=timer)
        made.append(engine)
        return engine

    yield make
    for engine in made:
        engine.close()


def ids_in(spark: Any, path: Path, fmt: str = "parquet") -> list[int]:
    df = spark.read.format(fmt).load(str(path))
    return sorted(int(r[0]) for r in df.selectExpr("contents['id']").collect())


def entries(path: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((path / "_loghubd_wal").glob("*.json"))]


def test_buffer_is_idempotent_and_acks_follow_the_commit(
    spark: Any, engines: Callable[..., Engine], tmp_path: Path
) -> None:
    engine = engines()
    first, retried, batches = [], [], []
    for k in range(3):
        for shard in (0, 1):
            b = make_batch(shard, k * 4, 4, 5, first_id=1000 * shard + 20 * k)
            batches.append(b)
            first.append(FakeAck())
            engine.add(b, first[-1])
            retried.append(FakeAck())
            engine.add(b, retried[-1])  # the daemon retrying process(): buffered once
    assert engine.buffered_rows == 6 * 20
    assert all(a.calls == 0 for a in first + retried)  # nothing is acked before the write
    engine.flush("test")
    assert all(a.calls == 1 and a.persist for a in first + retried)
    expected = sorted(1000 * s + i for s in (0, 1) for i in range(60))
    assert ids_in(spark, tmp_path / "out") == expected
    [entry] = entries(tmp_path / "out")
    assert entry["state"] == COMMITTED
    assert entry["shards"] == {
        "0": {"start": cursors.from_seq(0, 0), "end": cursors.from_seq(0, 12)},
        "1": {"start": cursors.from_seq(1, 0), "end": cursors.from_seq(1, 12)},
    }
    assert sorted(map(tuple, entry["batches"])) == sorted(
        (b.shard, b.cursor, b.next_cursor) for b in batches
    )
    # One Spark write for both shards: partitioned by (dt, batch).
    parts = sorted(
        p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").glob("dt=*/batch=*")
    )
    assert parts == [f"dt=2023-11-14/batch={entry['batch']}"]


def test_redelivered_data_is_acked_without_writing_it_again(
    spark: Any, engines: Callable[..., Engine], tmp_path: Path
) -> None:
    """After a crash between the WAL commit and the checkpoint, the daemon delivers the same
    batches again: fully covered ones are acked at once, partly covered ones lose their
    first (end - start) log groups."""
    engine = engines()
    engine.add(make_batch(0, 0, 10, 3, first_id=0), FakeAck())
    engine.flush("test")
    again = FakeAck()
    engine.add(make_batch(0, 0, 10, 3, first_id=0), again)  # [0, 10) exactly
    assert again.calls == 1 and engine.buffered_rows == 0
    inside = FakeAck()
    engine.add(make_batch(0, 2, 5, 3, first_id=6), inside)  # [2, 7): inside
    assert inside.calls == 1 and engine.buffered_rows == 0
    partial = FakeAck()
    engine.add(make_batch(0, 8, 6, 3, first_id=24), partial)  # [8, 14): 2 groups covered
    assert partial.calls == 0 and engine.buffered_rows == 4 * 3
    engine.flush("test")
    assert partial.calls == 1
    assert ids_in(spark, tmp_path / "out") == list(range(14 * 3))  # no duplicate, no gap
    # A restarted daemon (a new engine on the same directory) knows it too.
    fresh = engines()
    ack = FakeAck()
    fresh.add(make_batch(0, 5, 9, 3, first_id=15), ack)
    assert ack.calls == 1 and fresh.buffered_rows == 0


def test_a_failing_write_fails_process_and_each_batch_is_then_written_alone(
    spark: Any, engines: Callable[..., Engine], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed write of two daemon batches is abandoned (no entry, no partitions are left)
    and each batch is written on its own: the caller's failure is raised, the other waits to
    be re-delivered (a rollback returned by its shard's next successful process())."""
    flag = tmp_path / "fail"
    monkeypatch.setenv(FAIL_FLAG, str(flag))
    engine = engines(function="spark_pipelines:fail_while_flagged", max_rows=40)
    flag.touch()  # after the warm-up
    factory = SparkFactory({"path": str(tmp_path / "out")})
    factory._engine = engine
    processor = SparkProcessor(factory, 0)
    tracker = FakeTracker()
    small = make_batch(0, 0, 2, 10, first_id=0)
    assert processor.process(small, tracker) is None  # below max_rows: buffered
    big = make_batch(0, 2, 3, 10, first_id=20)
    with pytest.raises(SparkError, match="injected pipeline failure"):
        processor.process(big, tracker)
    assert all(a.calls == 0 for a in tracker.acks)
    assert entries(tmp_path / "out") == []  # abandoned through the write-ahead log
    with pytest.raises(SparkError):
        processor.process(big, tracker)  # the daemon's retry: written alone, still failing
    flag.unlink()
    # Succeeds alone; the shard is asked to deliver `small` again (it failed in this call's
    # predecessor, not in its own process()).
    assert processor.process(big, tracker) == small.cursor
    assert processor.process(small, tracker) is None  # the re-delivery writes it alone
    assert [a.calls for a in tracker.acks] == [1, 0, 0, 1, 1]
    assert [e["state"] for e in entries(tmp_path / "out")] == [COMMITTED, COMMITTED]
    assert ids_in(spark, tmp_path / "out") == list(range(50))
    # What /metrics would say: the pair, then each alone, then big's retry; two writes.
    assert _samples(engine) == {
        "loghubd_spark_write_failures_total": 4.0,
        "loghubd_spark_writes_total": 2.0,
        "loghubd_spark_written_rows_total": 50.0,
        "loghubd_spark_write_duration_seconds_count": 2.0,
        "loghubd_spark_buffered_rows": 0.0,
    }


def test_one_bad_batch_fails_alone_and_leaves_the_buffer_when_given_up(
    spark: Any, engines: Callable[..., Engine], tmp_path: Path
) -> None:
    """A log the pipeline cannot take (division by zero) in one daemon batch of a write that
    holds batches of two shards: the innocent batches are written and acked at once; the bad
    one is asked for again (once), fails in its own process() after its re-delivery and, once
    the daemon gives it up (dead letter), no later write holds it."""
    engine = engines(
        sql="SELECT *, 1 / (CAST(contents['id'] AS INT) - 1042) AS x FROM {logs}", max_rows=60
    )
    factory = SparkFactory({"path": str(tmp_path / "out")})
    factory._engine = engine
    shard0, shard1 = SparkProcessor(factory, 0), SparkProcessor(factory, 1)
    t0, t1 = FakeTracker(), FakeTracker()
    bad = make_batch(1, 0, 2, 10, first_id=1040)  # holds id 1042
    assert shard1.process(bad, t1) is None
    assert shard0.process(make_batch(0, 0, 2, 10, first_id=0), t0) is None
    # Crosses max_rows on shard 0: the write of all three fails, then each is written alone.
    assert shard0.process(make_batch(0, 2, 2, 10, first_id=20), t0) is None
    assert [a.calls for a in t0.acks] == [1, 1] and t1.acks[0].calls == 0
    assert ids_in(spark, tmp_path / "out") == list(range(40))
    # Shard 1 is asked for the bad batch once: by the daemon while it waits for data
    # (`redelivery()`, a quiet shard), else by its next batch's process(). Shard 0 owes nothing.
    assert shard0.redelivery() is None
    assert shard1.redelivery() == bad.cursor
    assert shard1.redelivery() is None
    after = make_batch(1, 2, 1, 10, first_id=1060)
    assert shard1.process(after, t1) is None  # asked already
    # The re-delivered bad batch fails on its own.
    for _ in range(3):  # the daemon's attempts; then it dead-letters the batch
        with pytest.raises(SparkError, match="DIVIDE_BY_ZERO"):
            shard1.process(bad, t1)
    assert engine.buffered_rows == 10  # `after` only: the bad batch left the buffer
    assert shard1.process(after, t1) is None
    engine.flush("test")
    assert ids_in(spark, tmp_path / "out") == [*range(40), *range(1060, 1070)]
    assert t1.acks[1].calls == 1 and all(a.calls == 0 for a in t1.acks[2:5])
    assert {e["state"] for e in entries(tmp_path / "out")} == {COMMITTED}


def _samples(engine: Engine) -> dict[str, float | None]:
    names = (
        "loghubd_spark_write_failures_total",
        "loghubd_spark_writes_total",
        "loghubd_spark_written_rows_total",
        "loghubd_spark_write_duration_seconds_count",
        "loghubd_spark_buffered_rows",
    )
    return {name: engine.metrics.registry.get_sample_value(name) for name in names}


def test_max_delay_timer_writes_and_retries_with_backoff(
    spark: Any, engines: Callable[..., Engine], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flag = tmp_path / "fail"
    monkeypatch.setenv(FAIL_FLAG, str(flag))
    engine = engines(function="spark_pipelines:fail_while_flagged", max_delay=0.3, timer=True)
    flag.touch()  # after the warm-up
    ack = FakeAck()
    engine.add(make_batch(1, 0, 2, 5, first_id=0), ack)
    # Failed, then retried by the timer (alone: its shard delivers nothing more, so it is
    # never re-delivered to a process()), each failed write abandoned.
    wait_until(
        lambda: (_samples(engine)["loghubd_spark_write_failures_total"] or 0) >= 2,
        30,
        "the timer did not retry the failed write",
    )
    assert ack.calls == 0
    flag.unlink()
    wait_until(lambda: ack.calls == 1, 30, "the timer never retried the failed write")
    assert ids_in(spark, tmp_path / "out") == list(range(10))
    assert [e["state"] for e in entries(tmp_path / "out")] == [COMMITTED]


def test_shutdown_of_a_shard_writes_everything_buffered(
    spark: Any, engines: Callable[..., Engine], tmp_path: Path
) -> None:
    engine = engines()
    acks = [FakeAck(), FakeAck()]
    engine.add(make_batch(0, 0, 1, 5, first_id=0), acks[0])
    engine.add(make_batch(3, 0, 1, 5, first_id=5), acks[1])
    engine.shutdown_shard(3)
    assert [a.calls for a in acks] == [1, 1]
    assert ids_in(spark, tmp_path / "out") == list(range(10))


def test_rewriting_a_batch_replaces_only_its_own_partitions(
    spark: Any, engines: Callable[..., Engine], tmp_path: Path
) -> None:
    """Dynamic partition overwrite by (dt, batch): a replay of batch A leaves batch B alone
    and does not duplicate A; the same holds for the JSON-lines sink."""
    for sink in ("parquet", "jsonl"):
        out = tmp_path / sink
        engine = engines(sink=sink, path=str(out))
        a = convert(0, cursors.from_seq(0, 0), make_batch(0, 0, 3, 4, 0).raw).table
        b = convert(1, cursors.from_seq(1, 0), make_batch(1, 0, 2, 4, 100).raw).table
        engine._spark_write(a, "batch-a", None)
        engine._spark_write(b, "batch-b", None)
        engine._spark_write(a, "batch-a", None)  # the replay
        fmt = "json" if sink == "jsonl" else "parquet"
        assert ids_in(spark, out, fmt) == [*range(12), *range(100, 108)]
        layout = sorted(p.relative_to(out).as_posix() for p in out.glob("dt=*/batch=*"))
        assert layout == ["dt=2023-11-14/batch=batch-a", "dt=2023-11-14/batch=batch-b"]
        if sink == "jsonl":
            sample = next(out.glob("dt=*/batch=batch-b/part-*"))
            record = json.loads(sample.read_text().splitlines()[0])
            assert record["contents"]["id"] == "100"


def test_function_pipeline_and_jsonl_sink(
    spark: Any, engines: Callable[..., Engine], tmp_path: Path
) -> None:
    engine = engines(function="spark_pipelines:tag_levels", sink="jsonl")
    engine.add(make_batch(0, 0, 4, 25, first_id=0), FakeAck())
    engine.flush("test")
    df = spark.read.json(str(tmp_path / "out"))
    got = sorted((r["id"], r["msg_len"]) for r in df.select("id", "msg_len").collect())
    assert got == [(n, len(f"synthetic log {n}")) for n in range(100) if n % 5 in (3, 4)]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"sql": "SELECT nope FROM {logs}"}, r"processor\.spark\.sql: .*nope"),
        # a syntax error: the reason is on the message's first line, not after a newline
        ({"sql": "SELECT * FORM {logs}"}, r"\Aprocessor\.spark\.sql: \[PARSE_SYNTAX_ERROR\]"),
        ({"sql": "SELECT contents FROM {logs}"}, r"needs 'dt' or __time__"),
        ({"sql": "SELECT __time__, 'x' AS batch FROM {logs}"}, r"changes the 'batch' column"),
        ({"function": "spark_pipelines:not_a_dataframe"}, r"must return a DataFrame, got int"),
    ],
)
def test_a_broken_pipeline_fails_start(
    spark: Any, tmp_path: Path, options: dict[str, Any], message: str
) -> None:
    opts = SparkOptions.parse({"path": str(tmp_path), **options})
    engine = Engine(opts, SparkRunner(opts.master, opts.conf, session=spark))
    with pytest.raises(jobs.PipelineError, match=message):
        engine.start(timer=False)
    engine.close()


def test_timeouts_cancel_the_jvm_job_by_tag(spark: Any) -> None:
    runner = SparkRunner("local[1]", {}, session=spark)
    runner.start()
    try:
        started = time.monotonic()
        with pytest.raises(SparkTimeout, match="write_timeout"):
            runner.run(
                lambda s: s.range(0, 10**13, numPartitions=1).selectExpr("sum(id)").collect(),
                tag="endless",
                timeout=1.0,
            )
        assert time.monotonic() - started < 30  # cancelled, not run to its end
        assert runner.run(lambda s: s.range(5).count(), tag="after") == 5  # thread is free
    finally:
        runner.stop()
    assert not spark.sparkContext._jsc.sc().isStopped()  # a borrowed session stays up


def test_a_job_submitted_after_the_cancel_is_cancelled_too(spark: Any) -> None:
    # ci run on b1ab850: the query was still being planned when the 1 s timeout cancelled its
    # tag, so no job had that tag yet and the endless one submitted afterwards ran on. Here
    # the call sleeps past its timeout before it submits the job: only a repeated cancel
    # stops it.
    runner = SparkRunner("local[1]", {}, session=spark)
    runner.start()

    def late(s: Any) -> Any:
        time.sleep(2.0)
        return s.range(0, 10**13, numPartitions=1).selectExpr("sum(id)").collect()

    try:
        started = time.monotonic()
        with pytest.raises(SparkTimeout, match="write_timeout"):
            runner.run(late, tag="late", timeout=1.0)
        assert time.monotonic() - started < 30, "the job submitted after the cancel ran on"
        assert not runner.busy
        assert runner.run(lambda s: s.range(3).count(), tag="after-late") == 3  # not cancelled
    finally:
        runner.stop()


def test_jobs_run_on_one_thread_with_their_tags(spark: Any) -> None:
    runner = SparkRunner("local[1]", {}, session=spark)
    runner.start()
    seen: list[tuple[str, set[str]]] = []

    def job(s: Any) -> None:
        seen.append((threading.current_thread().name, set(s.sparkContext.getJobTags())))

    try:
        for tag in ("a", "b"):
            runner.run(job, tag=tag)
    finally:
        runner.stop()
    assert [name for name, _ in seen] == [seen[0][0]] * 2
    assert seen[0][0].startswith("loghubd-spark")
    assert seen[0][1] == {"loghubd-spark", "a"} and seen[1][1] == {"loghubd-spark", "b"}


def test_out_of_memory_errors_say_what_to_do() -> None:
    text = explain(RuntimeError("java.lang.OutOfMemoryError: Java heap space"), 300 * 2**20)
    assert "spark.driver.memory" in text and "[processor.spark.conf]" in text
    assert "4x the Arrow bytes" in text and "~1200 MiB" in text
    assert "spark.driver.memory" not in explain(RuntimeError("other"))


def test_recovery_rewrites_crashed_writes_over_exactly_their_ranges(
    spark: Any, engines: Callable[..., Engine], tmp_path: Path
) -> None:
    """Two writes crashed: one after its WAL entry (nothing in the sink), one in the middle
    of writing the sink (some files only). A restarted engine re-reads exactly their ranges
    from the service, rewrites them under the same batch ids and commits them; the daemon's
    re-delivery of those batches is then acked without writing."""
    server = ServerProcess(tmp_path / "server").start()
    try:
        produce(server.endpoint, "sparkrec", "app", 2400, shards=2, group_size=40)
        source = Source(server.endpoint, "sparkrec", "app")
        per_shard = {s: source.batches(s, 10) for s in (0, 1)}
        ctx = make_context(
            endpoint=server.endpoint, project="sparkrec", logstore="app", group="g", consumer="c"
        )
        crashed = engines(context=ctx)
        leases = []
        for k in (0, 1):  # two crashed writes, each with the k-th batch of both shards
            items = []
            for shard in (0, 1):
                b = per_shard[shard][k]
                crashed.add(b, FakeAck())
            items = crashed._take()
            pw = crashed._prepare(items)
            assert pw is not None
            pw.lease = crashed.wal.begin(pw.entry)
            if k == 1:
                crashed._spark_write(pw.table(), pw.entry.batch, None)
                files = sorted((tmp_path / "out").glob(f"dt=*/batch={pw.entry.batch}/*.parquet"))
                for f in files[1:]:
                    f.unlink()  # as if killed while Spark was moving files into place
            leases.append(pw.lease)
        for lease in leases:
            lease.release()  # the process "dies": its locks go
        restarted = engines(context=ctx)  # start(): recovery
        states = {e["batch"]: e["state"] for e in entries(tmp_path / "out")}
        assert sorted(states.values()) == [COMMITTED, COMMITTED]
        expected = sorted(int(r["id"]) for s in (0, 1) for b in per_shard[s][:2] for r in b.logs())
        assert ids_in(spark, tmp_path / "out") == expected
        # The daemon re-delivers what it never checkpointed: nothing is written twice.
        acks = []
        for s in (0, 1):
            for b in per_shard[s][:3]:
                acks.append(FakeAck())
                restarted.add(b, acks[-1])
        assert [a.calls for a in acks] == [1, 1, 0, 1, 1, 0]
        restarted.flush("test")
        expected += sorted(int(r["id"]) for s in (0, 1) for r in per_shard[s][2].logs())
        assert ids_in(spark, tmp_path / "out") == sorted(expected)
        # Housekeeping keeps entries above the (absent) checkpoints.
        assert restarted.collect_garbage() == 0
    finally:
        server.kill()


TTL_DAY_S = 1.0  # the server's TTL "day" in the expiry test


def test_recovery_of_crashed_writes_whose_logs_expired_commits_them_once(
    spark: Any, engines: Callable[..., Engine], tmp_path: Path
) -> None:
    """The daemon was down longer than the logstore's TTL with two crashed writes: one that
    wrote nothing, one whose output Spark had made visible. Their logs expired, so neither can
    be rewritten from the source. A restart commits both entries, once, with one
    `spark_recovery_data_lost` error each: the visible output stays as it was (rewriting from
    what is retained would delete it), the other writes what is retained (here: nothing). The
    next start finds nothing to recover and logs nothing."""
    server = ServerProcess(
        tmp_path / "server",
        extra_args=["--ttl-day-seconds", str(TTL_DAY_S), "--expire-interval", "0.2"],
    ).start()
    try:
        source = Source(server.endpoint, "sparkttl", "app")
        source._run(lambda c: c.create_project())
        source._run(lambda c: c.create_logstore("app", 1, ttl=3650))  # 3650 days of 1 s: an hour
        produce(server.endpoint, "sparkttl", "app", 400, group_size=40)
        batches = source.batches(0, 5)
        ctx = make_context(
            endpoint=server.endpoint, project="sparkttl", logstore="app", group="g", consumer="c"
        )
        crashed = engines(context=ctx)
        leases, names = [], []
        for k, visible in ((0, False), (1, True)):
            crashed.add(batches[k], FakeAck())
            pw = crashed._prepare(crashed._take())
            assert pw is not None
            pw.lease = crashed.wal.begin(pw.entry)
            if visible:
                crashed._spark_write(pw.table(), pw.entry.batch, None)
            leases.append(pw.lease)
            names.append(pw.entry.batch)
        for lease in leases:
            lease.release()  # the process "dies": its locks go
        end = source._run(lambda c: c.get_cursor("app", 0, "end"))
        source._run(lambda c: c.update_logstore("app", ttl=1))  # the daemon is "down" a day
        wait_until(
            lambda: source._run(lambda c: c.get_cursor("app", 0, "begin")) == end,
            30,
            "the logs did not expire",
        )
        with structlog.testing.capture_logs() as logs:
            engines(context=ctx)  # start(): recovery
        lost = [e for e in logs if e["event"] == "spark_recovery_data_lost"]
        assert sorted(e["batch"] for e in lost) == sorted(names)
        by_batch = {e["batch"]: e for e in lost}
        assert by_batch[names[1]]["kept"] == "the crashed write's output, as it was"
        assert by_batch[names[0]]["kept"] == "the retained logs"
        assert by_batch[names[0]]["rows_written"] == 0
        assert by_batch[names[0]]["lost"] == [
            f"shard 0: {batches[0].cursor} to {batches[0].next_cursor}"
        ]
        assert not [e for e in logs if e["event"] == "spark_recovery_failed"]
        assert sorted(e["state"] for e in entries(tmp_path / "out")) == [COMMITTED, COMMITTED]
        # The visible write's rows are still there; the other wrote nothing.
        assert ids_in(spark, tmp_path / "out") == sorted(int(r["id"]) for r in batches[1].logs())
        with structlog.testing.capture_logs() as again:
            engines(context=ctx)
        assert not [e for e in again if e["event"].startswith("spark_recovery")]
    finally:
        server.kill()


def test_arrow_table_goes_to_spark_without_pandas(spark: Any) -> None:
    import sys

    table = convert(0, cursors.from_seq(0, 0), make_batch(0, 0, 2, 3, 0).raw).table
    df = jobs.to_dataframe(spark, table)
    assert df.count() == 6
    assert dict(df.dtypes)["contents"] == "map<string,string>"
    assert dict(df.dtypes)["__time__"] == "timestamp"
    assert "pandas" not in sys.modules
    assert isinstance(table, pa.Table)


def test_a_paused_former_owner_never_rewrites_a_collected_range(
    spark: Any, engines: Callable[..., Engine], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two daemons on one sink: the former owner of shard 0 holds a batch (paused); the new
    owner writes the same range, the checkpoint passes it and the collection deletes its
    entry. The former owner, resuming, never read that entry, yet the floor the collection
    recorded first makes it ack the batch without writing it again."""
    import loghubd_spark.engine as engine_module

    checkpoints: dict[int, int] = {}
    monkeypatch.setattr(engine_module, "committed_checkpoints", lambda ctx: dict(checkpoints))
    former = engines(context=make_context())
    batch = make_batch(0, 0, 3, 5, first_id=0)
    held = FakeAck()
    former.add(batch, held)  # buffered, then the process is paused and loses the shard
    owner = engines(context=make_context())
    ack = FakeAck()
    owner.add(batch, ack)
    owner.flush("test")
    assert ack.calls == 1
    checkpoints[0] = cursors.decode(batch.next_cursor)
    assert owner.collect_garbage() == 1
    assert entries(tmp_path / "out") == []
    former.flush("test")  # resumes
    assert held.calls == 1
    assert ids_in(spark, tmp_path / "out") == list(range(15))
    redelivered = FakeAck()
    fresh = engines(context=make_context())  # a process that never saw the entry
    fresh.add(batch, redelivered)
    assert redelivered.calls == 1 and fresh.buffered_rows == 0


def test_a_sink_given_as_a_uri_keeps_its_write_ahead_log_in_wal_dir(
    spark: Any, engines: Callable[..., Engine], tmp_path: Path
) -> None:
    """`path` as a URI (how s3a:// or hdfs:// sinks are given) goes to Spark unchanged; the
    write-ahead log lives in `wal_dir`, and an abandoned write's partitions are removed through
    Spark's file system API, not the local one."""
    out, wal_dir = tmp_path / "lake", tmp_path / "wal"
    engine = engines(path=out.as_uri(), wal_dir=str(wal_dir))
    acks = [FakeAck(), FakeAck()]
    for shard, ack in zip((0, 1), acks, strict=True):
        engine.add(make_batch(shard, 0, 4, 5, first_id=1000 * shard), ack)
    engine.flush("test")
    assert all(a.calls == 1 and a.persist for a in acks)
    assert ids_in(spark, out) == sorted(1000 * s + i for s in (0, 1) for i in range(20))
    [entry] = entries(wal_dir)
    assert entry["state"] == COMMITTED
    assert not (out / "_loghubd_wal").exists()

    # A pending write whose shard is lost: abandon() deletes its partitions, and only those.
    lease = engine.wal.begin(
        Entry(
            batch="lost-write",
            project="",
            logstore="",
            ranges=[Range(0, cursors.from_seq(0, 4), cursors.from_seq(0, 8))],
        )
    )
    partial = out / "dt=2023-11-14" / "batch=lost-write"
    partial.mkdir(parents=True)
    (partial / "part-0.parquet").write_bytes(b"half a file")
    engine.wal.abandon(lease)
    assert not partial.exists()
    assert ids_in(spark, out) == sorted(1000 * s + i for s in (0, 1) for i in range(20))
    assert [e["batch"] for e in entries(wal_dir)] == [entry["batch"]]


def test_a_replay_run_again_after_the_checkpoint_collection_writes_nothing_twice(
    spark: Any, engines: Callable[..., Engine], tmp_path: Path, loghubd_server: ServerProcess
) -> None:
    """Under `loghubd dead-letters replay` (context.replay) a write's entry is marked, and the
    write-ahead log's checkpoint-driven collection keeps it: the same dead letter handed over
    again (a replay interrupted before it removed the letter) is acked, not written again."""
    # A real service (the engine asks it for the group's checkpoints after a write; it has
    # no such group, which the engine shrugs off as it does any failed look-up).
    context = make_context(
        endpoint=loghubd_server.endpoint,
        project="p",
        logstore="ls",
        group="g",
        consumer="c",
        replay=True,
    )
    letter = make_batch(0, 40, 2, 5, first_id=500)
    first = engines(context=context)
    first.add(letter, FakeAck())
    first.flush("test")
    [entry] = entries(tmp_path / "out")
    assert entry["replay"] is True
    assert first.wal.gc({0: 10_000}) == 0  # the daemon's checkpoint is far past it: kept
    again, ack = engines(context=context), FakeAck()
    again.add(letter, ack)
    again.flush("test")
    assert ack.calls == 1
    assert ids_in(spark, tmp_path / "out") == list(range(500, 510))
