"""Benchmark of `loghubd run` against the official SDK's ConsumerWorker, on the same
`loghubd serve` and the same data, in the same run.

    .venv/bin/python bench/daemon_bench.py [--quick] [--only a,b,c] [--json FILE]

The server is pinned to core 0; each consumer process (the daemon or the SDK worker, always a
separate process so its CPU is separable) and this script to core 1.

(a) Efficiency: logs per CPU-second of the consumer process (utime+stime from
    /proc/<pid>/stat), start-up excluded. A "gate" consumer (this script, heartbeating over
    HTTP) holds every shard; the consumer under test starts and joins (daemon: /readyz is 200;
    SDK: it appears in the group), is left idle 0.5 s, its CPU is read, then the gate leaves
    the group (loghubd's explicit-leave extension) so the backlog goes to the consumer at its
    next heartbeat; CPU is read again the moment the last log is processed. loghubd: the
    `null` processor with `records = true` (builds every record dict via Batch.logs());
    SDK: a ConsumerJsonProcessorBase (the SDK builds the same flattened dicts). Two
    backlogs: 200,000 logs in 10-log groups, and ~200,000 logs in 100-1000-log groups.
(b) Cold-start drain: wall time from process start to the last of 200,000 logs (10-log
    groups) processed; fresh consumer group each time; the SDK with data_fetch_interval=0.2
    and heartbeat_interval=2. Two processor modes, each on both sides: `count` (loghubd's
    plain `null`, which counts the logs; the SDK: a ConsumerProcessorBase counting the logs
    of the LogGroupList it parsed) and `records` (the dicts of (a) on both sides).
    Alternating daemon/SDK runs; medians reported.
(c) Hand-over and fail-over with two daemons (heartbeat_interval=1, timeout=4, 8 shards):
    SIGTERM one, time until the other's /status shows all 8 shards held and consuming;
    then kill -9 one, the same.

Completion is detected from loghubd's /metrics (`loghubd_consumed_logs_total`, polled every
0.2 s in (a), every 0.25 s in (b); the scrapes' own CPU is measured and reported) and from the
SDK process's stdout (its processor prints when the count is reached). The completion time is
each consumer's own clock: the SDK prints it, and loghubd's is the newest
`loghubd_last_batch_timestamp_seconds` (when its last batch was finished), so neither depends on
how often it is polled.
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
from daemon_drain import drain_run
from daemon_efficiency import efficiency_run, scrape_cost
from daemon_handover import handover_trials
from daemon_procs import (
    LS_BIG,
    LS_SMALL,
    load_data,
)

# -- driver ----------------------------------------------------------------------------------


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--only", default="a,b,c", help="which parts to run (a,b,c)")
    p.add_argument("--json", type=Path)
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    p.add_argument("--reps", type=int, default=0, help="repetitions of (a) and (b) (default 3)")
    p.add_argument("--trials", type=int, default=0, help="hand-over trials (default: --reps)")
    args = p.parse_args()
    parts = set(args.only.split(","))
    reps = args.reps or (1 if args.quick else 3)
    small_groups = 2000 if args.quick else 20000
    big_groups = 40 if args.quick else 432  # 432 groups cycling 100/250/500/1000 = 199,800 logs

    C.pin_self(C.LOAD_CORE)
    work = Path(tempfile.mkdtemp(prefix="loghubd-daemonbench-"))
    server = C.start_server(work)
    results: dict[str, Any] = {"machine": C.machine_notes()}
    try:
        print("loading data ...", flush=True)
        t = time.perf_counter()
        counts = asyncio.run(load_data(server.port, small_groups, big_groups))
        results["data"] = counts
        print(f"  {counts} in {time.perf_counter() - t:.1f} s", flush=True)
        t_part = time.perf_counter()
        if "a" in parts:
            res: dict[str, Any] = {}
            print("measuring the cost of a /metrics scrape ...", flush=True)
            res["metrics_scrape"] = scrape = scrape_cost(work, server.port)
            for ls in (LS_SMALL, LS_BIG):
                runs: list[dict[str, Any]] = []
                for i in range(reps):
                    for kind in ("loghubd", "sdk"):
                        r = efficiency_run(
                            kind,
                            work,
                            server.port,
                            ls,
                            counts[ls],
                            f"{ls}{i}",
                            scrape["cpu_ms_per_scrape"] / 1e3,
                        )
                        print(
                            f"(a) {ls} {kind}: {r['logs_per_cpu_s']:,.0f} logs/CPU-s "
                            f"(raw {r['logs_per_cpu_s_raw']:,.0f}; {r['cpu_s']:.2f} CPU-s, "
                            f"{r['metrics_scrapes']} scrapes, {r['wall_s']:.2f} s wall)",
                            flush=True,
                        )
                        runs.append(r)
                med = {
                    k: statistics.median(r["logs_per_cpu_s"] for r in runs if r["consumer"] == k)
                    for k in ("loghubd", "sdk")
                }
                res[ls] = {
                    "median_logs_per_cpu_s": med,
                    "ratio_loghubd_vs_sdk": med["loghubd"] / med["sdk"],
                    "runs": runs,
                }
            results["efficiency"] = res
            print(f"  (a) took {time.perf_counter() - t_part:.0f} s", flush=True)
            t_part = time.perf_counter()
        if "b" in parts:
            results["drain"] = {}
            for mode in ("count", "records"):
                runs = []
                for i in range(reps):
                    for kind in ("loghubd", "sdk"):
                        r = drain_run(
                            kind,
                            work,
                            server.port,
                            counts[LS_SMALL],
                            f"{mode}{i}",
                            records=mode == "records",
                        )
                        print(
                            f"(b) drain {mode} {kind}: {r['wall_s']:.2f} s from process start "
                            f"= {r['startup_s']:.2f} s start-up ({r['startup_cpu_s']:.2f} "
                            f"CPU-s) + {r['after_startup_s']:.2f} s; "
                            f"{r['cpu_s_incl_startup']:.2f} CPU-s in all",
                            flush=True,
                        )
                        runs.append(r)
                results["drain"][mode] = _drain_summary(runs)
            results["import_floor"] = import_floor(max(5, 3 * reps))
            print(f"  (b) took {time.perf_counter() - t_part:.0f} s", flush=True)
            t_part = time.perf_counter()
        if "c" in parts:
            print(
                "(c) hand-over / fail-over, 2 daemons, 8 shards, heartbeat 1 s, timeout 4 s",
                flush=True,
            )
            results["handover"] = handover_trials(work, server.port, args.trials or reps)
            print(f"  (c) took {time.perf_counter() - t_part:.0f} s", flush=True)
    finally:
        server.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print("work directory kept:", work)
    report(results)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1))
    return 0


# What a cold start costs before any loghubd code runs: the interpreter, and importing the
# libraries the daemon is built on (the issue names aiohttp for the client).
IMPORT_FLOOR = {
    "interpreter": "pass",
    "aiohttp": "import aiohttp",
    "dependencies": "import aiohttp, aiohttp.web, anyio, structlog, prometheus_client, pluggy, "
    "google.protobuf.message, lz4.block, zstandard",
    "loghubd.app": "import loghubd.app",
}


def import_floor(reps: int) -> dict[str, dict[str, float]]:
    """Median wall and CPU seconds of a process that only imports (pinned like the consumers)."""
    samples: dict[str, list[tuple[float, float]]] = {k: [] for k in IMPORT_FLOOR}
    for _ in range(reps):
        for name, code in IMPORT_FLOOR.items():
            t = time.perf_counter()
            proc = subprocess.Popen(["taskset", "-c", str(C.LOAD_CORE), sys.executable, "-c", code])
            _pid, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            if proc.returncode != 0:
                raise RuntimeError(f"{code!r} exited with {proc.returncode}")
            samples[name].append((time.perf_counter() - t, usage.ru_utime + usage.ru_stime))
    return {
        name: {
            "wall_s": statistics.median(w for w, _c in xs),
            "cpu_s": statistics.median(c for _w, c in xs),
        }
        for name, xs in samples.items()
    }


def _drain_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    med = {
        k: statistics.median(r["wall_s"] for r in runs if r["consumer"] == k)
        for k in ("loghubd", "sdk")
    }
    parts_med = {
        k: {
            f: statistics.median(r[f] for r in runs if r["consumer"] == k)
            for f in ("startup_s", "after_startup_s", "cpu_s_incl_startup")
        }
        for k in ("loghubd", "sdk")
    }
    return {
        "median_wall_s": med,
        "speedup_vs_sdk": med["sdk"] / med["loghubd"],
        "median_parts": parts_med,
        "runs": runs,
    }


def report(r: dict[str, Any]) -> None:
    print("\n== loghubd run vs the official SDK ConsumerWorker ==", r["machine"]["date"])
    if "efficiency" in r:
        e = r["efficiency"]
        for ls, label in ((LS_SMALL, "10 logs/group"), (LS_BIG, "100-1000 logs/group")):
            m = e[ls]["median_logs_per_cpu_s"]
            verdict = "met" if m["loghubd"] >= 180_000 else "MISSED"
            print(
                f"(a) {label:20}: loghubd {m['loghubd']:,.0f} logs/CPU-s, SDK "
                f"{m['sdk']:,.0f} -> {e[ls]['ratio_loghubd_vs_sdk']:.2f}x "
                f"(target >= 180,000: {verdict})"
            )
        s = e["metrics_scrape"]
        print(
            f"    one /metrics scrape costs the daemon {s['cpu_ms_per_scrape']:.2f} CPU-ms "
            f"(at 20 scrapes/s: {s['share_at_20_scrapes_per_s']:.1%} of a core)"
        )
    for mode, d in r.get("drain", {}).items():
        m = d["median_wall_s"]
        verdict = "met" if d["speedup_vs_sdk"] >= 5 else "MISSED"
        print(
            f"(b) drain 200k logs from cold start, {mode}: loghubd {m['loghubd']:.2f} s, SDK "
            f"{m['sdk']:.2f} s -> {d['speedup_vs_sdk']:.2f}x faster (target >= 5x: {verdict})"
        )
        for k in ("loghubd", "sdk"):
            x = d["median_parts"][k]
            print(
                f"    {k:7}: start-up {x['startup_s']:.2f} s + drain "
                f"{x['after_startup_s']:.2f} s; {x['cpu_s_incl_startup']:.2f} CPU-s in all"
            )
    if "import_floor" in r:
        f = r["import_floor"]
        print(
            "    before any loghubd code runs (process that only imports, wall): interpreter "
            f"{f['interpreter']['wall_s']:.3f} s, + aiohttp {f['aiohttp']['wall_s']:.3f} s, "
            f"+ every dependency {f['dependencies']['wall_s']:.3f} s; "
            f"import loghubd.app {f['loghubd.app']['wall_s']:.3f} s"
        )
        for mode, d in r.get("drain", {}).items():
            budget = d["median_wall_s"]["sdk"] / 5
            print(
                f"    {mode}: 5x the SDK is {budget:.3f} s; importing the dependencies leaves "
                f"{budget - f['dependencies']['wall_s']:.3f} s for loghubd's own start-up and "
                "the whole drain"
            )
    if "handover" in r:
        h = r["handover"]
        for mode in ("graceful", "crash"):
            x = h[mode]
            extra = ""
            if mode == "graceful":
                extra = f" (target <= 2.0 s: {'met' if x['max_s'] <= 2.0 else 'MISSED'})"
            print(f"(c) {mode:8}: median {x['median_s']:.2f} s, max {x['max_s']:.2f} s{extra}")


if __name__ == "__main__":
    raise SystemExit(main())
