"""The three sinks of issue #15, each against its plain baseline, in the same run.

- `parquet`: the `parquet` processor over a 2,000,000-log backlog (20 batches of 1,000 log
  groups of 100 logs, from the wire bytes) vs plain pyarrow writing the same rows
  (`pq.write_table` of the same Arrow tables, zstd, min/max of the time columns as the
  processor's default `statistics = "time"`, 1,000,000 rows a file) and the `spark`
  processor writing the same batches (`--spark MASTER`, default local[2]; its CPU includes the
  JVM's; it runs in a child process, so no JVM is alive while the other phases run). CPU
  seconds of this process (the processor runs here, as in a daemon's worker threads, with
  Arrow on jemalloc as in a daemon: bench/_common.py).
- `postgres`: the `postgres` processor (exactly once: positions in the transaction) vs a plain
  COPY loop of the same rows into the same server (one transaction per batch, rows from
  `batch.logs()` written with psycopg's `write_row`), rows per wall second; and the cost of
  the exactly-once statements alone: the same pre-encoded COPY text with and without them.
- `http`: the `http` processor against a local endpoint that answers 200 at once (an aiohttp
  server in another process), logs per second and this process's CPU per request.

Repetitions are interleaved (A, B, A, B, ...) and reported as min / median / max.

    .venv/bin/python bench/sinks_bench.py [--only parquet,postgres,http] [--reps 3] [--quick]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import ROOT, make_log_group

sys.path.insert(0, str(ROOT / "plugins" / "loghubd-postgres" / "tests"))

import anyio
import pyarrow as pa
import pyarrow.parquet as pq

from loghubd import Batch, ProcessorContext
from loghubd.protocol import cursor as cursors
from loghubd.protocol import pb
from loghubd.testing import RecordingTracker, free_port, make_context


def context() -> ProcessorContext:
    return make_context(project="bench", logstore="bench", group="g", consumer="bench")


def make_batches(count: int, groups: int, logs: int, unique_groups: int) -> list[Batch]:
    """`count` batches of `groups` log groups of `logs` logs, at consecutive positions of
    shard 0; `unique_groups` distinct groups reused (building them is the slow part)."""
    pool = [make_log_group(logs, seed=i, start_id=i * logs) for i in range(unique_groups)]
    out = []
    for b in range(count):
        chosen = [pool[(b * groups + g) % unique_groups] for g in range(groups)]
        raw = pb.frame_log_groups(chosen)
        first = b * groups
        out.append(
            Batch(0, cursors.from_seq(0, first), cursors.from_seq(0, first + groups), raw, groups)
        )
    return out


def spread(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def interleaved(reps: int, phases: dict[str, Callable[[], float]]) -> dict[str, dict[str, float]]:
    results: dict[str, list[float]] = {name: [] for name in phases}
    for _ in range(reps):
        for name, run in phases.items():
            results[name].append(run())
            print(f"  {name}: {results[name][-1]:,.0f}", flush=True)
    return {name: spread(v) for name, v in results.items()}


# -- parquet -----------------------------------------------------------------------------------


def bench_parquet(
    reps: int, quick: bool, max_rows: int = 100_000, spark: str | None = None
) -> dict[str, Any]:
    from loghubd.processors.parquet import ParquetFactory

    count = 4 if quick else 20
    batches = make_batches(count, groups=1000, logs=100, unique_groups=200)
    total = sum(b.log_count for b in batches)
    tables = [pa.Table.from_batches([b.arrow()]) for b in batches]
    work = Path(tempfile.mkdtemp(prefix="sinks-bench-"))

    def processor() -> float:
        out = work / "proc"
        shutil.rmtree(out, ignore_errors=True)
        for b in batches:
            b._cache.clear()
        factory = ParquetFactory({"path": str(out), "max_rows": max_rows})
        factory.bind(context())
        p = factory(0)
        t = RecordingTracker()
        started = time.process_time()
        p.initialize(0)
        for b in batches:
            p.process(b, t)
        p.shutdown(t)
        cpu = time.process_time() - started
        assert len(t.acked) + len(t.saved) == len(batches), t
        return total / cpu

    from loghubd.processors.parquet import DICTIONARY_PAGE_BYTES, TIME_STATISTICS

    write = {  # the processor's defaults: the same files
        "compression": "zstd",
        "write_statistics": list(TIME_STATISTICS),
        "dictionary_pagesize_limit": DICTIONARY_PAGE_BYTES,
    }

    def plain() -> float:
        out = work / "plain"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        started = time.process_time()
        buffered: list[pa.Table] = []
        rows, n = 0, 0
        for table in tables:
            buffered.append(table)
            rows += table.num_rows
            if rows >= 1_000_000:
                pq.write_table(pa.concat_tables(buffered), out / f"{n}.parquet", **write)
                buffered, rows, n = [], 0, n + 1
        if buffered:
            pq.write_table(pa.concat_tables(buffered), out / f"{n}.parquet", **write)
        return total / (time.process_time() - started)

    def convert() -> float:
        for b in batches:
            b._cache.clear()
        started = time.process_time()
        for b in batches:
            b.arrow()
        return total / (time.process_time() - started)

    phases = {
        "parquet processor (wire -> files), logs/CPU-s": processor,
        "plain pyarrow write of the same tables, logs/CPU-s": plain,
        "batch.arrow() alone, logs/CPU-s": convert,
    }
    if spark is not None:
        phases["spark processor (wire -> files), logs/CPU-s of process + JVM"] = lambda: (
            spark_in_child(spark, count, max_rows, work / "spark")
        )
    try:
        print(f"parquet: {total:,} logs", flush=True)
        result = interleaved(reps, phases)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"logs": total, **result}


def spark_in_child(master: str, count: int, max_rows: int, path: Path) -> float:
    """The `spark` processor's figure, measured in a child process (`--spark-child`): its
    JVM lives only while it is measured, so the other phases never run beside an idle JVM
    (its threads cost the phases measured beside it ~25-30 %)."""
    done = subprocess.run(
        [
            sys.executable,
            __file__,
            "--spark-child",
            master,
            "--spark-count",
            str(count),
            "--spark-max-rows",
            str(max_rows),
            "--spark-path",
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if done.returncode:
        raise RuntimeError(f"spark child failed: {done.stderr[-2000:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["logs_per_cpu_s"])


def spark_child(master: str, count: int, max_rows: int, path: Path) -> None:
    """The same batches as `bench_parquet` through the `spark` processor (plugins/
    loghubd-spark) on a SparkSession started here (not measured; one warm-up write first):
    prints logs per CPU second of this process and its JVM."""
    import spark_bench
    from loghubd_spark.runner import SparkRunner

    batches = make_batches(count, groups=1000, logs=100, unique_groups=200)
    total = sum(b.log_count for b in batches)
    runner = SparkRunner(master, {"spark.ui.enabled": "false", "spark.driver.memory": "2g"})
    runner.start()
    try:
        spark = runner.spark
        spark.sparkContext.setLogLevel("ERROR")
        spark_bench.run_processor(spark, master, [batches[:1]], path, max_rows)  # warm up
        for b in batches:
            b._cache.clear()
        *_, cpu = spark_bench.run_processor(spark, master, [batches], path, max_rows)
    finally:
        runner.stop()
    print(json.dumps({"logs_per_cpu_s": total / cpu}))


# -- postgres ----------------------------------------------------------------------------------


def bench_postgres(reps: int, quick: bool) -> dict[str, Any]:
    import psycopg
    from loghubd_postgres.factory import PostgresFactory
    from pg_server import PgServer

    count = 20 if quick else 100
    batches = make_batches(count, groups=10, logs=100, unique_groups=200)
    total = sum(b.log_count for b in batches)
    server = PgServer().start()
    columns = {
        "id": "text",
        "level": "text",
        "status": "integer",
        "latency_ms": "double precision",
        "logged_at": {"field": "__time__", "type": "timestamptz"},
    }
    names = ["id", "level", "status", "latency_ms", "logged_at", "rest"]
    runs = iter(range(10**6))

    def fresh(kind: str) -> str:
        return server.create_database(f"{kind}_{next(runs)}")

    def processor() -> float:
        dsn = fresh("proc")
        factory = PostgresFactory(
            {"dsn": dsn, "table": "logs", "create_table": True, "columns": columns,
             "rest_column": "rest"}
        )  # fmt: skip
        factory.bind(context())
        p = factory(0)

        async def go() -> float:
            await p.initialize(0)
            started = time.perf_counter()
            for b in batches:
                b._cache.clear()
                await p.process(b, RecordingTracker())
            elapsed = time.perf_counter() - started
            await p.shutdown(RecordingTracker())
            return elapsed

        return total / anyio.run(go)

    def ddl(conn: psycopg.Connection[Any]) -> None:
        conn.execute(
            "CREATE TABLE logs (id text, level text, status integer,"
            " latency_ms double precision, logged_at timestamptz, rest jsonb)"
        )

    def plain_copy() -> float:
        """What someone would write without loghubd: logs() -> rows -> COPY, per batch."""
        from datetime import UTC, datetime

        dsn = fresh("plain")
        with psycopg.connect(dsn, autocommit=True) as conn:
            ddl(conn)
            cols = ", ".join(names)
            started = time.perf_counter()
            for b in batches:
                b._cache.clear()
                with conn.transaction(), conn.cursor().copy(f"COPY logs ({cols}) FROM STDIN") as cp:
                    for log in b.logs():
                        rest = {k: v for k, v in log.items() if k not in columns}
                        cp.write_row(
                            (log.get("id"), log.get("level"), int(log["status"]),
                             float(log["latency_ms"]),
                             datetime.fromtimestamp(log["__time__"], UTC), json.dumps(rest))
                        )  # fmt: skip
            return total / (time.perf_counter() - started)

    # The exactly-once statements alone: the same pre-encoded COPY text, with and without
    # SELECT ... FOR UPDATE of the position, SELECT of the replayed set-aside notes in the
    # range, and UPDATE of the position (with the DELETE of the set-aside notes it overlaps in
    # the same statement; no notes here, as in steady consumption) in the transaction.
    from loghubd_postgres.options import parse
    from loghubd_postgres.rows import RowEncoder

    encoder = RowEncoder(parse({"dsn": "x", "table": "logs", "columns": columns,
                                "rest_column": "rest"}))  # fmt: skip
    texts = [encoder.encode(b.logs())[0] for b in batches]

    def copy_only(with_position: bool) -> Callable[[], float]:
        def run() -> float:
            dsn = fresh("pos" if with_position else "raw")
            with psycopg.connect(dsn, autocommit=True) as conn:
                ddl(conn)
                conn.execute("CREATE TABLE pos (k int PRIMARY KEY, cursor text, position bigint)")
                conn.execute("INSERT INTO pos VALUES (0, '', 0)")
                conn.execute(
                    "CREATE TABLE aside (k int, start bigint, stop bigint, replayed_at"
                    " timestamptz, PRIMARY KEY (k, start))"
                )
                started = time.perf_counter()
                for i, text in enumerate(texts):
                    with conn.transaction():
                        if with_position:
                            conn.execute("SELECT cursor, position FROM pos WHERE k = 0 FOR UPDATE")
                            conn.execute(
                                "SELECT start, stop FROM aside WHERE k = 0 AND start < %s AND"
                                " stop > %s AND replayed_at IS NOT NULL ORDER BY start",
                                (i + 1, i),
                            ).fetchall()
                        with conn.cursor().copy(f"COPY logs ({', '.join(names)}) FROM STDIN") as cp:
                            cp.write(text)
                        if with_position:
                            conn.execute(
                                "WITH n AS (DELETE FROM aside WHERE k = 0 AND start < %s AND"
                                " stop > %s AND replayed_at IS NULL)"
                                " UPDATE pos SET cursor = %s, position = %s WHERE k = 0",
                                (i + 1, i, "c", i),
                            )
                return time.perf_counter() - started

        return run

    try:
        print(f"postgres: {total:,} rows in {len(batches)} transactions", flush=True)
        result = interleaved(
            reps,
            {
                "postgres processor, rows/s": processor,
                "plain COPY loop (logs() -> write_row), rows/s": plain_copy,
            },
        )
        seconds = interleaved(
            reps,
            {
                "pre-encoded COPY, s": copy_only(False),
                "pre-encoded COPY + exactly-once statements, s": copy_only(True),
            },
        )
    finally:
        server.stop()
    a = seconds["pre-encoded COPY, s"]["median"]
    b = seconds["pre-encoded COPY + exactly-once statements, s"]["median"]
    ratio = (
        result["postgres processor, rows/s"]["median"]
        / result["plain COPY loop (logs() -> write_row), rows/s"]["median"]
    )
    return {
        "rows": total,
        "transactions": len(batches),
        **result,
        **seconds,
        "processor / plain (medians)": ratio,
        "exactly-once cost per transaction, ms": (b - a) / len(batches) * 1000,
        "exactly-once cost per row, us": (b - a) / total * 1e6,
    }


# -- http --------------------------------------------------------------------------------------

RECEIVER = """
import sys
from aiohttp import web
async def ok(request):
    await request.read()
    return web.Response(status=200)
app = web.Application(client_max_size=1 << 28)
app.router.add_post("/ingest", ok)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""


def bench_http(reps: int, quick: bool) -> dict[str, Any]:
    import urllib.request

    from loghubd.processors.http import HttpFactory

    count = 4 if quick else 20
    batches = make_batches(count, groups=100, logs=100, unique_groups=200)
    total = sum(b.log_count for b in batches)
    port = free_port()
    receiver = subprocess.Popen([sys.executable, "-c", RECEIVER, str(port)])
    url = f"http://127.0.0.1:{port}/ingest"
    deadline = time.monotonic() + 20
    while True:
        try:
            urllib.request.urlopen(urllib.request.Request(url, data=b"", method="POST"), timeout=1)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)

    def run(gzip: bool) -> Callable[[], float]:
        def go() -> float:
            factory = HttpFactory({"url": url, "gzip": gzip, "batch_size": 1000, "concurrency": 4})
            p = factory(0)

            async def main() -> tuple[float, float]:
                await factory.start()
                try:
                    cpu, wall = time.process_time(), time.perf_counter()
                    for b in batches:
                        b._cache.clear()
                        await p.process(b, RecordingTracker())
                    return time.perf_counter() - wall, time.process_time() - cpu
                finally:
                    await factory.close()

            wall, cpu = anyio.run(main)
            requests = sum(-(-b.log_count // 1000) for b in batches)
            costs.setdefault(gzip, []).append(cpu / requests * 1000)
            return total / wall

        return go

    costs: dict[bool, list[float]] = {}
    try:
        print(f"http: {total:,} logs, 1,000 a request", flush=True)
        result = interleaved(
            reps, {"http processor, logs/s": run(False), "http processor gzip, logs/s": run(True)}
        )
    finally:
        receiver.terminate()
        receiver.wait(10)
    return {
        "logs": total,
        **result,
        "CPU ms per request (1,000 logs)": spread(costs[False]),
        "CPU ms per request, gzip": spread(costs[True]),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="parquet,postgres,http")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    ap.add_argument(
        "--spark",
        default="local[2]",
        metavar="MASTER",
        help="Spark master for the spark processor's parquet row ('' leaves it out)",
    )
    ap.add_argument("--spark-child", help=argparse.SUPPRESS)
    ap.add_argument("--spark-count", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--spark-max-rows", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--spark-path", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.spark_child:
        spark_child(args.spark_child, args.spark_count, args.spark_max_rows, args.spark_path)
        return
    out: dict[str, Any] = {}
    with open("/proc/loadavg") as f:
        out["loadavg_before"] = f.read().split()[:3]
    for part in args.only.split(","):
        if part == "parquet":
            out[part] = bench_parquet(args.reps, args.quick, spark=args.spark or None)
            continue
        out[part] = {"postgres": bench_postgres, "http": bench_http}[part](args.reps, args.quick)
    with open("/proc/loadavg") as f:
        out["loadavg_after"] = f.read().split()[:3]
    text = json.dumps(out, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")


if __name__ == "__main__":
    main()
