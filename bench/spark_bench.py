"""Benchmark of the `spark` processor (plugins/loghubd-spark) against plain PySpark.

    .venv/bin/python bench/spark_bench.py [--quick] [--json bench/results/spark.json]

Everything runs in this process on ONE SparkSession (`--master`, default local[*]), so both
sides pay the same JVM, the same cores and the same disk:

1. Conversion: daemon batches (realistic ~200-byte logs, 9 fields, 100 logs per log group)
   → Arrow, on one thread: rows/s.
2. Throughput, alternating rounds (median reported):
   - plain PySpark: the SAME Arrow data (converted beforehand, not timed), in the same write
     sizes, `spark.createDataFrame(table).write.mode("append").parquet(dir)`;
   - the processor end to end: `SparkProcessor.process()` called from one thread per shard
     (as the daemon's worker threads do) with deferred acks, until every ack is done:
     conversion + buffering + write-ahead entry (fsynced) + DataFrame + pipeline (identity)
     + partitioning by (dt, batch) + dynamic overwrite + commit of the entry + acks.
   Ratio = processor rows/s ÷ plain rows/s (target >= 0.8).
3. Per-batch overhead: many small writes (`--small-rows` each): the mean time of one
   processor write (add + flush) minus one plain write of the same Arrow data; and the
   write-ahead log alone (begin + commit: two atomic writes, four fsyncs).
While the processor runs, a probe thread sleeps 5 ms in a loop and records how late it wakes:
the worst lateness is what the daemon's event loop would have felt (GIL hold times).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C

from loghubd.models import Batch
from loghubd.protocol import cursor as cursors
from loghubd.protocol import pb

LOGS_PER_GROUP = 100


class Ack:
    def __init__(self, pending: list[int], lock: threading.Lock, done: threading.Event) -> None:
        self.pending, self.lock, self.all_done = pending, lock, done
        self.called = False

    def done(self, persist: bool = False) -> None:
        with self.lock:
            if self.called:
                return
            self.called = True
            self.pending[0] -= 1
            if self.pending[0] == 0:
                self.all_done.set()


class Tracker:
    def __init__(self, pending: list[int], lock: threading.Lock, done: threading.Event) -> None:
        self.args = (pending, lock, done)

    def defer(self) -> Ack:
        return Ack(*self.args)

    def save_checkpoint(self, persist: bool = True) -> None:
        raise AssertionError("unused")

    def get_checkpoint(self) -> str:
        return ""


def make_batches(shards: int, per_shard: int, batch_rows: int) -> list[list[Batch]]:
    """`per_shard` batches of `batch_rows` rows for each shard (groups of 100 logs)."""
    groups_per_batch = max(1, batch_rows // LOGS_PER_GROUP)
    cache: dict[int, bytes] = {}
    out: list[list[Batch]] = []
    next_id = 0
    for shard in range(shards):
        batches = []
        for k in range(per_shard):
            seq = k * groups_per_batch
            parts = []
            for g in range(groups_per_batch):
                key = (shard * 7 + k * 3 + g) % 64  # 64 distinct groups, reused
                if key not in cache:
                    cache[key] = C.make_log_group(LOGS_PER_GROUP, seed=key, start_id=next_id)
                    next_id += LOGS_PER_GROUP
                parts.append(cache[key])
            raw = pb.frame_log_groups(parts)
            batches.append(
                Batch(
                    shard,
                    cursors.from_seq(shard, seq),
                    cursors.from_seq(shard, seq + groups_per_batch),
                    raw,
                    groups_per_batch,
                )
            )
        out.append(batches)
    return out


class StallProbe:
    """Sleeps 5 ms in a loop; records the worst oversleep (GIL hold, scheduling)."""

    def __init__(self) -> None:
        self.worst = 0.0
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            t = time.perf_counter()
            time.sleep(0.005)
            late = time.perf_counter() - t - 0.005
            self.samples.append(late)
            self.worst = max(self.worst, late)

    def __enter__(self) -> StallProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def p99(self) -> float:
        s = sorted(self.samples)
        return s[int(0.99 * (len(s) - 1))] if s else 0.0


def run_plain(runner: Any, tables: list[Any], path: Path) -> tuple[float, float]:
    shutil.rmtree(path, ignore_errors=True)
    cpu0, started = C.tree_cpu(), time.perf_counter()
    for i, table in enumerate(tables):
        runner.run(
            lambda s, t=table: s.createDataFrame(t).write.mode("append").parquet(str(path)),
            tag=f"plain-{i}",
        )
    return time.perf_counter() - started, C.tree_cpu() - cpu0


def make_engine(
    spark: Any, master: str, path: Path, write_rows: int, convert_processes: int | None = None
) -> Any:
    from loghubd_spark.engine import Engine
    from loghubd_spark.options import SparkOptions
    from loghubd_spark.runner import SparkRunner

    shutil.rmtree(path, ignore_errors=True)
    opts = SparkOptions.parse(
        {
            "path": str(path),
            "master": master,
            "max_rows": write_rows,
            "max_bytes": 1 << 40,
            "max_delay": 3600.0,
            **({} if convert_processes is None else {"convert_processes": convert_processes}),
        }
    )
    engine = Engine(opts, SparkRunner(master, {}, session=spark))
    engine.start(timer=False)
    return engine


def run_processor(
    spark: Any,
    master: str,
    batches: list[list[Batch]],
    path: Path,
    write_rows: int,
    convert_processes: int | None = None,
) -> tuple[float, float, float, int, float]:
    from loghubd_spark.plugin import SparkFactory, SparkProcessor

    engine = make_engine(spark, master, path, write_rows, convert_processes)
    factory = SparkFactory({"path": str(path)})
    factory._engine = engine
    total = sum(len(b) for b in batches)
    pending, lock, done = [total], threading.Lock(), threading.Event()
    errors: list[BaseException] = []

    def shard_worker(shard_batches: list[Batch]) -> None:
        processor = SparkProcessor(factory, shard_batches[0].shard)
        tracker = Tracker(pending, lock, done)
        try:
            for b in shard_batches:
                processor.process(b, tracker)  # type: ignore[arg-type]
        except BaseException as exc:
            errors.append(exc)

    with StallProbe() as probe:
        cpu0, started = C.tree_cpu(), time.perf_counter()
        threads = [threading.Thread(target=shard_worker, args=(b,)) for b in batches]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        engine.flush("bench")  # what is left below max_rows (the daemon: max_delay/shutdown)
        if not done.wait(600):
            raise RuntimeError("acks missing")
        elapsed = time.perf_counter() - started
        cpu = C.tree_cpu() - cpu0
    writes = int(engine.metrics.registry.get_sample_value("loghubd_spark_writes_total") or 0)
    engine.close()
    if errors:
        raise errors[0]
    return elapsed, probe.worst, probe.p99(), writes, cpu


def per_write_overhead(
    spark: Any, runner: Any, master: str, workdir: Path, small_rows: int, n: int
) -> dict[str, float]:
    from loghubd.arrow import convert
    from loghubd.wal import Entry, Range, Wal

    [[batch]] = make_batches(1, 1, small_rows)
    table = convert(batch.shard, batch.cursor, batch.raw).table
    plain_dir = workdir / "plain-small"
    times_plain, times_proc = [], []
    engine = make_engine(spark, master, workdir / "proc-small", small_rows * 10)
    for i in range(n):
        t = time.perf_counter()
        runner.run(
            lambda s: s.createDataFrame(table).write.mode("append").parquet(str(plain_dir)),
            tag=f"small-{i}",
        )
        times_plain.append(time.perf_counter() - t)
        b = Batch(
            0,
            cursors.from_seq(0, i * batch.group_count),
            cursors.from_seq(0, (i + 1) * batch.group_count),
            batch.raw,
            batch.group_count,
        )
        t = time.perf_counter()
        engine.add(b, _NullAck())
        engine.flush("bench")
        times_proc.append(time.perf_counter() - t)
    engine.close()
    wal = Wal(workdir / "wal-only", "p", "ls")
    wal_times = []
    for i in range(n):
        entry = Entry(
            f"b{i}", "p", "ls", [Range(0, cursors.from_seq(0, i), cursors.from_seq(0, i + 1))]
        )
        t = time.perf_counter()
        wal.commit(wal.begin(entry))
        wal_times.append(time.perf_counter() - t)
    t = time.perf_counter()
    for _ in range(n):
        convert(batch.shard, batch.cursor, batch.raw)
    conv = (time.perf_counter() - t) / n
    plain, proc = statistics.median(times_plain), statistics.median(times_proc)
    return {
        "rows_per_write": small_rows,
        "plain_write_ms": round(plain * 1000, 1),
        "processor_write_ms": round(proc * 1000, 1),
        "overhead_ms": round((proc - plain) * 1000, 1),
        "of_which_wal_ms": round(statistics.median(wal_times) * 1000, 2),
        "of_which_conversion_ms": round(conv * 1000, 2),
    }


class _NullAck:
    def done(self, persist: bool = False) -> None:
        pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--batches-per-shard", type=int, default=4)
    ap.add_argument("--batch-rows", type=int, default=25_000, help="rows per daemon batch")
    ap.add_argument("--write-rows", type=int, default=100_000, help="max_rows (rows per write)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds of each side")
    ap.add_argument("--small-rows", type=int, default=1000)
    ap.add_argument("--small-writes", type=int, default=20)
    ap.add_argument("--driver-memory", default="2g")
    ap.add_argument("--convert-processes", type=int, help="default: the processor's default")
    ap.add_argument("--quick", action="store_true", help="small sizes, one round")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    if args.quick:
        args.batches_per_shard, args.rounds, args.small_writes = 2, 1, 5

    from loghubd_spark.runner import SparkRunner

    from loghubd.arrow import convert

    workdir = Path(tempfile.mkdtemp(prefix="loghubd-spark-bench-"))
    notes = C.machine_notes()
    batches = make_batches(args.shards, args.batches_per_shard, args.batch_rows)
    rows = sum(b.group_count * LOGS_PER_GROUP for bs in batches for b in bs)
    print(f"{rows:,} rows in {sum(len(b) for b in batches)} daemon batches, {args.shards} shards")

    # 1. conversion, one thread
    started = time.perf_counter()
    converted = [[convert(b.shard, b.cursor, b.raw).table for b in bs] for bs in batches]
    conv_s = time.perf_counter() - started
    print(f"conversion: {rows / conv_s:,.0f} rows/s on one thread")
    # The plain side writes the same Arrow data in the same write sizes (round robin over
    # shards, as the processor receives it).
    import pyarrow as pa

    order = [converted[s][k] for k in range(args.batches_per_shard) for s in range(args.shards)]
    tables, acc, n = [], [], 0
    for t in order:
        acc.append(t)
        n += t.num_rows
        if n >= args.write_rows:
            tables.append(pa.concat_tables(acc))
            acc, n = [], 0
    if acc:
        tables.append(pa.concat_tables(acc))
    arrow_mib = sum(t.nbytes for t in tables) / 2**20

    runner = SparkRunner(
        args.master,
        {
            "spark.ui.enabled": "false",
            "spark.driver.memory": args.driver_memory,
            "spark.sql.shuffle.partitions": "4",
        },
    )
    t = time.perf_counter()
    runner.start()
    spark = runner.spark
    spark.sparkContext.setLogLevel("ERROR")
    session_s = time.perf_counter() - t
    try:
        # warm both paths (JIT, class loading) before measuring
        run_plain(runner, tables[:1], workdir / "plain-warm")
        cp = args.convert_processes
        run_processor(
            spark,
            args.master,
            [bs[:1] for bs in batches],
            workdir / "proc-warm",
            args.write_rows,
            cp,
        )
        plain_s, proc_s, stalls, p99s, writes = [], [], [], [], 0
        plain_cpu, proc_cpu = [], []
        for r in range(args.rounds):
            wall, cpu = run_plain(runner, tables, workdir / "plain")
            plain_s.append(wall)
            plain_cpu.append(cpu)
            elapsed, worst, p99, writes, cpu = run_processor(
                spark, args.master, batches, workdir / "proc", args.write_rows, cp
            )
            proc_s.append(elapsed)
            proc_cpu.append(cpu)
            stalls.append(worst)
            p99s.append(p99)
            print(
                f"round {r + 1}: plain {rows / plain_s[-1]:,.0f} rows/s, "
                f"processor {rows / elapsed:,.0f} rows/s ({writes} writes), "
                f"worst 5 ms-probe lateness {worst * 1000:.0f} ms"
            )
        overhead = per_write_overhead(
            spark, runner, args.master, workdir, args.small_rows, args.small_writes
        )
    finally:
        runner.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    plain_rate = rows / statistics.median(plain_s)
    proc_rate = rows / statistics.median(proc_s)
    result = {
        "machine": notes,
        "master": args.master,
        "rows": rows,
        "arrow_mib": round(arrow_mib, 1),
        "daemon_batch_rows": args.batch_rows,
        "write_rows": args.write_rows,
        "session_start_s": round(session_s, 2),
        "conversion_rows_per_s_one_thread": round(rows / conv_s),
        "plain_pyspark_rows_per_s": round(plain_rate),
        "processor_rows_per_s": round(proc_rate),
        "ratio": round(proc_rate / plain_rate, 3),
        "rounds": args.rounds,
        "plain_s": [round(x, 3) for x in plain_s],
        "processor_s": [round(x, 3) for x in proc_s],
        "round_ratios": [round(p / q, 3) for p, q in zip(plain_s, proc_s, strict=True)],
        "plain_cpu_s_per_100k_rows": round(statistics.median(plain_cpu) * 1e5 / rows, 3),
        "processor_cpu_s_per_100k_rows": round(statistics.median(proc_cpu) * 1e5 / rows, 3),
        "convert_processes": cp if cp is not None else "default",
        "probe_worst_lateness_ms": round(max(stalls) * 1000, 1),
        "probe_p99_lateness_ms": round(statistics.median(p99s) * 1000, 1),
        "per_write": overhead,
    }
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
