"""The `loghub` Structured Streaming source (local[2]) against the in-daemon `spark` processor,
on the same data, into the same Parquet layout.

    .venv/bin/python bench/stream_bench.py [--quick] [--rounds 2] [--json bench/results/stream.json]

One `loghubd serve` (a real process), loaded once with realistic ~200-byte logs (9 fields,
100 logs per log group) over 4 shards. Then rounds alternate, each side a fresh process with a
fresh consumer group and output directory:

- **stream**: `loghubd spark-stream --available-now` (`master = "local[2]"`,
  `max_log_groups_per_trigger = 1000`, i.e. 100,000-row micro-batches): executors' Python
  workers pull and convert, `foreachBatch` writes with the identity pipeline, partitioned by
  (`dt`, `batch`), dynamic overwrite;
- **processor**: `loghubd run` with `processor = "spark"` (`master = "local[2]"`,
  `max_rows = 100000`, `checkpoint_interval = 0.5`, defaults otherwise).
Both get the processor's session defaults plus a 2 GiB driver and no UI.

Both are timed the same way: from the first PullLogs the service answers in the round (its
`loghubd_server_requests_total{api="PullLogs"}` moves) until every shard's checkpoint in the
group is at its end (polled every 0.1 s; the processor commits every 0.5 s, the source when
Spark plans the next micro-batch). JVM start, the processor's warm-up job and the stream's
planning before its first pull are excluded on both sides; each round's JVM is a new one.
CPU: utime+stime of the consumer's process tree (the command, its JVM, Python workers and
conversion children; the server excluded). Nothing is pinned: Spark uses both cores. Output
rows are counted (pyarrow) after each round: exactly the loaded number, or the run fails.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C

from loghubd.protocol import cursor as cursors
from loghubd.protocol.signing import Credentials

PROJECT, LOGSTORE, SHARDS, LOGS_PER_GROUP = "streambench", "app", 4, 100
SPARK_CONF = {"spark.driver.memory": "2g", "spark.ui.enabled": "false"}


def load(server: C.ServerProcess, logs: int) -> int:
    groups = logs // LOGS_PER_GROUP
    bodies = C.make_bodies([LOGS_PER_GROUP] * groups)

    async def go() -> None:
        async with C.session(8) as s:
            sls = C.Sls(s, server.port, PROJECT)
            await sls.create_project()
            await sls.create_logstore(LOGSTORE, SHARDS)
            await C.put_all(sls, LOGSTORE, bodies, 4)

    asyncio.run(go())
    return groups * LOGS_PER_GROUP


def caught_up(server: C.ServerProcess, group: str, ends: dict[int, str]) -> bool:
    from loghubd_spark.source import SyncSls

    with SyncSls(server.endpoint, PROJECT, lambda: Credentials("", "")) as sls:
        try:
            rows = sls.call(lambda c: c.checkpoints(LOGSTORE, group))
        except Exception:
            return False
    cps = {r["shard"]: r["checkpoint"] for r in rows}
    return all(cps.get(s) == e for s, e in ends.items())


def end_cursors(server: C.ServerProcess) -> dict[int, str]:
    from loghubd_spark.source import SyncSls

    async def go(c: Any) -> dict[int, str]:
        return {s: await c.get_cursor(LOGSTORE, s, "end") for s in range(SHARDS)}

    with SyncSls(server.endpoint, PROJECT, lambda: Credentials("", "")) as sls:
        ends: dict[int, str] = sls.call(go)
    return ends


Measured = tuple[dict[str, float], Path]


def measure(
    server: C.ServerProcess,
    group: str,
    ends: dict[int, str],
    cpu: Any,
    alive: Any,
    timeout: float,
    pulls_before: float,
) -> dict[str, float]:
    """From the phase's first PullLogs to every checkpoint at its end."""
    deadline = time.monotonic() + timeout
    while C.pulls_answered(server) <= pulls_before:
        if not alive() or time.monotonic() > deadline:
            raise RuntimeError("no PullLogs")
        time.sleep(0.02)
    t0, c0 = time.perf_counter(), cpu()
    while not caught_up(server, group, ends):
        if not alive() or time.monotonic() > deadline:
            raise RuntimeError("not caught up")
        time.sleep(0.1)
    return {"seconds": time.perf_counter() - t0, "cpu_seconds": cpu() - c0}


def count_rows(path: Path) -> int:
    import pyarrow.dataset as ds

    return int(ds.dataset(str(path), format="parquet", partitioning="hive").count_rows())


def spawn(work: Path, name: str, args: list[str]) -> subprocess.Popen[bytes]:
    log = open(work / f"{name}.log", "ab")  # noqa: SIM115 - owned by the child
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    proc = subprocess.Popen(
        [sys.executable, "-m", "loghubd", *args], stdout=log, stderr=subprocess.STDOUT, env=env
    )
    log.close()
    return proc


def conf_table() -> str:
    return "".join(f'"{k}" = "{v}"\n' for k, v in SPARK_CONF.items())


def run_stream(server: C.ServerProcess, work: Path, n: int, ends: dict[int, str]) -> Measured:
    group, out = f"stream-{n}", work / f"stream-out-{n}"
    cfg = work / f"stream-{n}.toml"
    cfg.write_text(
        f"""[source]
endpoint = "{server.endpoint}"
project = "{PROJECT}"
logstore = "{LOGSTORE}"

[consumer]
group = "{group}"

[spark_stream]
path = "{out}"
checkpoint_location = "{work / f"stream-chk-{n}"}"
master = "local[2]"
max_log_groups_per_trigger = 1000

[spark_stream.conf]
{conf_table()}"""
    )
    before = C.pulls_answered(server)
    proc = spawn(work, f"stream-{n}", ["spark-stream", "-c", str(cfg), "--available-now"])
    try:
        result = measure(
            server,
            group,
            ends,
            lambda: C.tree_cpu(proc.pid),
            lambda: proc.poll() in (None, 0),
            300,
            before,
        )
        if proc.wait(120) != 0:
            raise RuntimeError(f"spark-stream exited with {proc.returncode}")
    finally:
        if proc.poll() is None:
            proc.kill()
    return result, out


def run_processor(server: C.ServerProcess, work: Path, n: int, ends: dict[int, str]) -> Measured:
    group, out = f"processor-{n}", work / f"processor-out-{n}"
    cfg = work / f"processor-{n}.toml"
    cfg.write_text(
        f"""[source]
endpoint = "{server.endpoint}"
project = "{PROJECT}"
logstore = "{LOGSTORE}"

[consumer]
group = "{group}"
checkpoint_interval = 0.5
heartbeat_interval = 2

[processor]
name = "spark"

[processor.spark]
path = "{out}"
master = "local[2]"
max_rows = 100000

[processor.spark.conf]
{conf_table()}
[ops]
listen = "127.0.0.1:{C.free_port()}"

[log]
format = "json"
"""
    )
    before = C.pulls_answered(server)
    proc = spawn(work, f"processor-{n}", ["run", "-c", str(cfg)])
    try:
        result = measure(
            server,
            group,
            ends,
            lambda: C.tree_cpu(proc.pid),
            lambda: proc.poll() is None,
            300,
            before,
        )
    finally:
        proc.terminate()
        proc.wait(90)
    return result, out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--logs", type=int, default=400_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="100,000 logs, one round")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    if args.quick:
        args.logs, args.rounds = 100_000, 1
    work = Path(tempfile.mkdtemp(prefix="stream-bench-"))
    notes = C.machine_notes()
    server = C.start_server(work, core=None)
    try:
        t = time.perf_counter()
        total = load(server, args.logs)
        print(f"loaded {total:,} logs in {time.perf_counter() - t:.1f} s", flush=True)
        ends = end_cursors(server)
        groups = sum(cursors.to_seq(s, e) for s, e in ends.items())
        results: dict[str, list[dict[str, float]]] = {"stream": [], "processor": []}
        for n in range(args.rounds):
            for kind, fn in (("stream", run_stream), ("processor", run_processor)):
                r, out = fn(server, work, n, ends)
                rows = count_rows(out)
                if rows != total:
                    raise RuntimeError(f"{kind} wrote {rows} rows, expected {total}")
                r["rows_per_s"] = total / r["seconds"]
                r["cpu_s_per_100k_rows"] = r["cpu_seconds"] / total * 100_000
                results[kind].append(r)
                print(
                    f"round {n} {kind:9s} {r['seconds']:6.2f} s  {r['rows_per_s']:>9,.0f} rows/s"
                    f"  {r['cpu_s_per_100k_rows']:.2f} CPU-s/100k rows",
                    flush=True,
                )
        summary = {
            kind: {
                "rows_per_s_median": statistics.median(r["rows_per_s"] for r in rs),
                "cpu_s_per_100k_rows_median": statistics.median(
                    r["cpu_s_per_100k_rows"] for r in rs
                ),
            }
            for kind, rs in results.items()
        }
        ratio = summary["stream"]["rows_per_s_median"] / summary["processor"]["rows_per_s_median"]
        print(
            f"median: stream {summary['stream']['rows_per_s_median']:,.0f} rows/s, processor "
            f"{summary['processor']['rows_per_s_median']:,.0f} rows/s, ratio {ratio:.2f}",
            flush=True,
        )
        report = {
            "machine": notes,
            "logs": total,
            "log_groups": groups,
            "rounds": results,
            "summary": summary,
            "stream_over_processor": ratio,
            "loadavg_at_end": os.getloadavg(),
        }
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    finally:
        server.kill()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
