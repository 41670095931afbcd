"""Peak memory of `loghubd run` draining a backlog: does `max_bytes_in_flight` hold?

One `loghubd serve`; per shard count (1, 8, 64, 256 by default) a logstore holding the same
backlog (log groups of 200 access-log-like logs, ~43 KB raw each, spread over the shards).
For each (shard count, processor) a fresh daemon with a fresh group drains it; the script
polls `loghubd_consumed_logs_total` until every log is counted and the daemon's
`loghubd_bytes_in_flight` gauge meanwhile, then reads the process's peak RSS (VmHWM) and
stops it. Processors: `null` with `records = true` (dicts built for every log), and `slow`:
the same plus a 50 ms sleep per batch (a sink slower than the pulls, so batches wait in
flight). A daemon with nothing to read gives the idle figure (imports, event loop, one shard
task per shard). Overhead = peak RSS - `max_bytes_in_flight`.

    .venv/bin/python bench/budget_bench.py [--groups 2000] [--shards 1,8,64,256]
        [--limit-mib 64] -> bench/results/budget_bench.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import _common as C

PROJECT = "membench"
SLOW_PLUGIN = '''
"""budget_bench's slow processor: records like null, then sleeps per batch."""
import time
from loghubd import hookimpl
from loghubd.plugins.api import ProcessorSpec


class Slow:
    def __init__(self, delay):
        self.delay = delay

    def initialize(self, shard):
        pass

    def process(self, batch, tracker):
        for chunk in batch.logs():
            pass
        time.sleep(self.delay)
        tracker.save_checkpoint(persist=False)

    def shutdown(self, tracker):
        pass


@hookimpl
def loghubd_register_processors():
    return [ProcessorSpec("slow", lambda o: (lambda shard: Slow(float(o.get("delay", 0.05)))),
                          "budget_bench: slow sink")]
'''


def plugin_site(root: Path) -> Path:
    site = root / "site"
    dist = site / "budget_bench_slow-0.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: budget-bench-slow\nVersion: 0\n")
    (dist / "entry_points.txt").write_text("[loghubd]\nslow = budget_bench_slow\n")
    (site / "budget_bench_slow.py").write_text(SLOW_PLUGIN)
    return site


async def load(port: int, shard_counts: list[int], groups: int) -> dict[str, int]:
    bodies = C.make_bodies([200] * min(groups, 200), seed=11)
    async with C.session() as s:
        sls = C.Sls(s, port, PROJECT)
        await sls.create_project()
        for n in shard_counts:
            await sls.create_logstore(f"mem-{n}", n)
            await C.put_all(sls, f"mem-{n}", [bodies[i % len(bodies)] for i in range(groups)], 4)
    per_body = sum(b.raw_size for b in bodies) / len(bodies)
    return {"logs": groups * 200, "raw_bytes": int(groups * per_body)}


def metric(text: str, name: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def run_daemon(
    work: Path, port: int, site: Path, logstore: str, processor: str, limit: int, expect: int
) -> dict[str, Any]:
    name = f"{logstore}-{processor}-{time.monotonic_ns()}"
    cfg = work / f"{name}.toml"
    ops = C.daemon_config(
        cfg,
        port=port,
        project=PROJECT,
        logstore=logstore,
        group=name,
        processor=processor,
        options="records = true" if processor == "null" else "delay = 0.05",
        consumer=f"heartbeat_interval = 2\nmax_bytes_in_flight = {limit}\ncheckpoint_interval = 1",
        log_level="warning",
    )
    env = C.loopback_env(PYTHONPATH=os.pathsep.join([str(site), str(C.ROOT)]))
    proc = C.spawn_daemon(cfg, work / f"{name}.log", env=env)
    started = time.monotonic()
    in_flight_max = consumed = 0.0
    try:
        while time.monotonic() - started < 600:
            time.sleep(0.1)
            if proc.poll() is not None:
                raise RuntimeError(f"daemon exited {proc.returncode}: see {work / name}.log")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ops}/metrics", timeout=5) as r:
                    text = r.read().decode()
            except OSError:
                continue
            in_flight_max = max(in_flight_max, metric(text, "loghubd_bytes_in_flight"))
            consumed = metric(text, "loghubd_consumed_logs_total")
            if consumed >= expect and time.monotonic() - started > (3.0 if not expect else 0):
                break
        took = time.monotonic() - started
        peak = C.status_bytes(proc.pid, "VmHWM")
    finally:
        proc.terminate()
        proc.wait(60)
    return {
        "logstore": logstore,
        "processor": processor,
        "consumed": int(consumed),
        "seconds": round(took, 2),
        "peak_rss_mb": round(peak / 1e6, 1),
        "overhead_mb": round((peak - limit) / 1e6, 1),
        "bytes_in_flight_max_mb": round(in_flight_max / 1e6, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", type=int, default=2000, help="log groups per logstore")
    ap.add_argument("--shards", default="1,8,64,256")
    ap.add_argument("--limit-mib", type=int, default=64)
    ap.add_argument("--processors", default="null,slow")
    ap.add_argument("--out", default=str(C.ROOT / "bench" / "results" / "budget_bench.json"))
    args = ap.parse_args()
    shard_counts = [int(s) for s in args.shards.split(",")]
    limit = args.limit_mib * 1024 * 1024
    with tempfile.TemporaryDirectory(prefix="budget-bench-") as tmp:
        work = Path(tmp)
        site = plugin_site(work)
        server = C.start_server(work, core=None)
        try:
            data = asyncio.run(load(server.port, shard_counts, args.groups))
            asyncio.run(_empty(server.port))
            print(
                f"backlog per logstore: {data['logs']:,} logs, {data['raw_bytes'] / 1e6:.0f} MB raw"
            )
            idle = run_daemon(work, server.port, site, "idle", "null", limit, 0)
            print(f"idle daemon: peak RSS {idle['peak_rss_mb']} MB")
            rows = []
            for n in shard_counts:
                for processor in args.processors.split(","):
                    row = run_daemon(
                        work, server.port, site, f"mem-{n}", processor, limit, data["logs"]
                    )
                    row["shards"] = n
                    rows.append(row)
                    print(json.dumps(row))
        finally:
            server.stop()
    result = {
        "machine": C.machine_notes(),
        "limit_mib": args.limit_mib,
        "backlog": data,
        "idle": idle,
        "runs": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    return 0


async def _empty(port: int) -> None:
    async with C.session() as s:
        await C.Sls(s, port, PROJECT).create_logstore("idle", 1)


if __name__ == "__main__":
    sys.exit(main())
