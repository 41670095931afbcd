"""Benchmark of `loghubd serve` on one core, and of the pure consumer-group coordinator.

    .venv/bin/python bench/server_bench.py [--quick] [--json bench/results/server.json]

The server process is pinned to core 0, this script (the load generator) to core 1. Every
figure comes with the server's CPU utilisation over the same interval (CPU seconds of the
server process / wall seconds, from /proc/<pid>/stat), the load generator's, and how many
cores' worth other processes used meanwhile (the machine is shared). The per-server-CPU-second
figures (logs, MB, heartbeats per CPU-second of the server) are what one dedicated core would
do and hardly move with other tenants' load; the per-wall-second ones do.

1. PutLogs ingest: realistic ~210-byte logs, 100/250/500/1000 logs per LogGroup (cycled),
   lz4, 4 requests in flight; plus a 10-logs-per-group row (per-request overhead).
2. PullLogs: every shard read from begin to end with count=1000, one puller per shard,
   Accept-Encoding lz4 and none; MB/s of raw (uncompressed) LogGroupList bytes.
3. Heartbeats, pure coordinator (in this process, pinned to core 0 for that phase):
   1,000 shards, 100 consumers joining at once; rounds until balanced (owned counts differ
   by <= 1, no TRANSFER or NOT_ALLOC left) and µs per heartbeat (`coordinator.step`),
   converging and steady, as CPU time of the thread (time.thread_time).
4. Heartbeats over HTTP against the real server: the same 1,000 shards (256 created, then
   372 splits: `loghubd serve` caps a new logstore at 256 shards; read-only parents are
   balanced like any shard), 100 consumers; rounds until balanced and steady requests/s
   with the 100 consumers heartbeating back to back.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C

from loghubd.server import coordinator as co

LOGSTORE_BIG = "ingest"
LOGSTORE_SMALL = "small"
LOGSTORE_HB = "hb"
GROUP_SIZES = (100, 250, 500, 1000)


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(p / 100 * len(s)))]


# -- 1. ingest -------------------------------------------------------------------------------


async def bench_ingest(
    sls: C.Sls, pid: int, logstore: str, bodies: list[C.Body], concurrency: int
) -> dict[str, Any]:
    rest = bodies
    meter = C.CpuMeter(pid).start()
    await C.put_all(sls, logstore, rest, concurrency)
    meter.stop()
    logs = sum(b.logs for b in rest)
    raw = sum(b.raw_size for b in rest)
    wire = sum(len(b.compressed) for b in rest)
    return {
        "requests": len(rest),
        "logs": logs,
        "seconds": meter.wall,
        "logs_per_s": logs / meter.wall,
        "raw_MB_per_s": raw / meter.wall / 1e6,
        "wire_MB_per_s": wire / meter.wall / 1e6,
        "requests_per_s": len(rest) / meter.wall,
        "requests_per_server_cpu_s": len(rest) / meter.cpu if meter.cpu else float("nan"),
        **meter.summary(),
        "logs_per_server_cpu_s": logs / meter.cpu if meter.cpu else float("nan"),
        "bytes_per_log": raw / logs,
    }


# -- 2. pull ---------------------------------------------------------------------------------


async def bench_pull(
    sls: C.Sls,
    pid: int,
    logstore: str,
    shards: int,
    accept: str,
    passes: int = 1,
    count: int = 1000,
) -> dict[str, Any]:
    """Read every shard from begin to end `passes` times, one puller per shard."""
    totals = {"groups": 0, "raw": 0, "wire": 0, "pulls": 0}
    begins = [await sls.cursor(logstore, s, "begin") for s in range(shards)]
    ends = [await sls.cursor(logstore, s, "end") for s in range(shards)]

    async def read_shard(shard: int) -> None:
        for _ in range(passes):
            await read_once(shard)

    async def read_once(shard: int) -> None:
        cursor, end = begins[shard], ends[shard]
        while cursor != end:
            cursor, groups, raw, wire = await sls.pull(logstore, shard, cursor, count, accept)
            totals["groups"] += groups
            totals["raw"] += raw
            totals["wire"] += wire
            totals["pulls"] += 1

    meter = C.CpuMeter(pid).start()
    await asyncio.gather(*(read_shard(s) for s in range(shards)))
    meter.stop()
    return {
        "codec": accept or "none",
        "count": count,
        "pulls": totals["pulls"],
        "log_groups": totals["groups"],
        "seconds": meter.wall,
        "raw_MB_per_s": totals["raw"] / meter.wall / 1e6,
        "wire_MB_per_s": totals["wire"] / meter.wall / 1e6,
        "pulls_per_s": totals["pulls"] / meter.wall,
        "raw_MB_per_pull": totals["raw"] / max(1, totals["pulls"]) / 1e6,
        **meter.summary(),
        "raw_MB_per_server_cpu_s": totals["raw"] / meter.cpu / 1e6 if meter.cpu else 0.0,
    }


# -- 3. coordinator, in process ---------------------------------------------------------------


def _owned(group: co.Group) -> dict[str, int] | None:
    """Owned (ALLOC) counts per consumer, or None while a TRANSFER or NOT_ALLOC is left."""
    owned = dict.fromkeys(group.consumers, 0)
    for e in group.shards.values():
        if e.state is co.TRANSFER or e.state is co.NOT_ALLOC:
            return None
        if e.state is co.ALLOC and e.owner is not None:
            owned[e.owner] += 1
    return owned


def is_balanced(group: co.Group) -> bool:
    owned = _owned(group)
    return owned is not None and max(owned.values()) - min(owned.values()) <= 1


def bench_coordinator(
    n_shards: int, n_consumers: int, order: str, steady_rounds: int, seed: int = 7
) -> dict[str, Any]:
    """All consumers join in round 1 (in `order`), then heartbeat once per round reporting
    their last answer (a client that lets go of a shard at once)."""
    group = co.new_group("bench", 60.0, False)
    group = co.step(group, co.ShardsAdded(tuple((i, ()) for i in range(n_shards)), 0.0)).group
    names = [f"c{i:03d}" for i in range(n_consumers)]
    held = {c: frozenset[int]() for c in names}
    rng = random.Random(seed)
    now = 1.0
    converge_us: list[float] = []
    transitions = 0
    rounds = 0
    # CPU time of this thread, not wall time: other tenants' load does not inflate it
    perf = time.thread_time
    while not is_balanced(group):
        rounds += 1
        if rounds > 100:
            raise RuntimeError("coordinator did not balance within 100 rounds")
        seq = names[:] if order == "sequential" else rng.sample(names, len(names))
        for c in seq:
            now += 0.001
            t = perf()
            out = co.step(group, co.HeartbeatReceived(c, held[c], now))
            converge_us.append((perf() - t) * 1e6)
            group, held[c] = out.group, frozenset(out.answer)
            transitions += len(out.transitions)
    # rounds until every consumer has also been *told* its final shards
    told_rounds = rounds
    while any(held[c] != _mine(group, c) for c in names):
        told_rounds += 1
        for c in names:
            now += 0.001
            out = co.step(group, co.HeartbeatReceived(c, held[c], now))
            group, held[c] = out.group, frozenset(out.answer)
    steady_us: list[float] = []
    changed = 0
    for _ in range(steady_rounds):
        for c in names:
            now += 0.001
            t = perf()
            out = co.step(group, co.HeartbeatReceived(c, held[c], now))
            steady_us.append((perf() - t) * 1e6)
            group = out.group
            changed += out.changed
    # where the steady time goes: building the result Group validates every shard (Rule 3)
    reps = 200
    t = perf()
    for _ in range(reps):
        co.Group(group.name, group.timeout, group.order, group.consumers, group.shards)
    construct_us = (perf() - t) / reps * 1e6
    wall = time.perf_counter()
    for c in names:
        now += 0.001
        group = co.step(group, co.HeartbeatReceived(c, held[c], now)).group
    steady_wall_us = (time.perf_counter() - wall) / len(names) * 1e6
    owned = _owned(group) or {}
    return {
        "shards": n_shards,
        "consumers": n_consumers,
        "join_order": order,
        "rounds_to_balanced": rounds,
        "rounds_until_all_told": told_rounds,
        "transitions": transitions,
        "converging_heartbeat_us_mean": statistics.fmean(converge_us),
        "converging_heartbeat_us_p99": pct(converge_us, 99),
        "converging_heartbeat_us_max": max(converge_us),
        "steady_heartbeat_us_mean": statistics.fmean(steady_us),
        "steady_heartbeat_us_p50": pct(steady_us, 50),
        "steady_heartbeat_us_p99": pct(steady_us, 99),
        "steady_changed_steps": changed,
        "steady_heartbeat_wall_us_mean": steady_wall_us,
        "group_construct_us": construct_us,
        "owned_min_max": [min(owned.values()), max(owned.values())] if owned else None,
    }


def _mine(group: co.Group, consumer: str) -> frozenset[int]:
    return frozenset(
        s for s, e in group.shards.items() if e.state is co.ALLOC and e.owner == consumer
    )


# -- 4. heartbeats over HTTP ------------------------------------------------------------------


def _mid(begin: str, end: str) -> str:
    b, e = int(begin, 16), int(end, 16)
    return f"{(b + e) // 2:032x}"


async def make_1000_shards(sls: C.Sls, logstore: str, target: int = 1000) -> int:
    await sls.create_logstore(logstore, 256)
    shards = await sls.list_shards(logstore)
    total = len(shards)
    queue = [s for s in shards if s["status"] == "readwrite"]
    while total < target and queue:
        s = queue.pop(0)
        made = await sls.split(
            logstore, s["shardID"], _mid(s["inclusiveBeginKey"], s["exclusiveEndKey"])
        )
        total += 2
        queue.extend(x for x in made if x["status"] == "readwrite")
    return total


def status_balanced(status: dict[str, Any]) -> bool:
    owned = dict.fromkeys(status["consumers"], 0)
    for s in status["shards"]:
        if s["state"] != "already_alloc":
            return False
        owned[s["owner"]] += 1
    return bool(owned) and max(owned.values()) - min(owned.values()) <= 1


async def bench_http_heartbeats(
    sls: C.Sls, pid: int, n_consumers: int, steady_seconds: float
) -> dict[str, Any]:
    n_shards = await make_1000_shards(sls, LOGSTORE_HB)
    group = "hbgroup"
    await sls.create_group(LOGSTORE_HB, group, 120)
    names = [f"c{i:03d}" for i in range(n_consumers)]
    held: dict[str, list[int]] = {c: [] for c in names}

    async def beat(c: str) -> float:
        t = time.perf_counter()
        held[c] = await sls.heartbeat(LOGSTORE_HB, group, c, held[c])
        return time.perf_counter() - t

    # all join at once, then one concurrent round at a time until balanced
    rounds = 0
    conv_lat: list[float] = []
    meter = C.CpuMeter(pid).start()
    while True:
        rounds += 1
        conv_lat += await asyncio.gather(*(beat(c) for c in names))
        if status_balanced(await sls.group_status(LOGSTORE_HB, group)) or rounds > 100:
            break
    meter.stop()
    converge = {
        "rounds_to_balanced": rounds,
        "seconds": meter.wall,
        "server_cpu_us_per_heartbeat": meter.cpu / len(conv_lat) * 1e6,
    }
    for _ in range(2):  # let every consumer learn its final shards
        await asyncio.gather(*(beat(c) for c in names))

    # steady state: every consumer heartbeats back to back
    stop_at = 0.0
    lat: list[float] = []

    async def loop(c: str) -> None:
        while time.perf_counter() < stop_at:
            lat.append(await beat(c))

    stop_at = time.perf_counter() + 0.5
    await asyncio.gather(*(loop(c) for c in names))  # warm-up
    lat.clear()
    stop_at = time.perf_counter() + steady_seconds
    meter = C.CpuMeter(pid).start()
    await asyncio.gather(*(loop(c) for c in names))
    meter.stop()
    n = len(lat)
    steady = {
        "requests": n,
        "seconds": meter.wall,
        "heartbeats_per_s": n / meter.wall,
        "heartbeats_per_server_cpu_s": n / meter.cpu if meter.cpu else float("nan"),
        **meter.summary(),
        "server_cpu_us_per_heartbeat": meter.cpu / n * 1e6,
        "latency_ms_p50": pct(lat, 50) * 1e3,
        "latency_ms_p99": pct(lat, 99) * 1e3,
    }

    # baseline: a small request that does not touch the coordinator (ListConsumerGroup)
    count = 0

    async def base_loop() -> None:
        nonlocal count
        while time.perf_counter() < stop_at:
            await sls.json("GET", f"/logstores/{LOGSTORE_HB}/consumergroups")
            count += 1

    stop_at = time.perf_counter() + min(3.0, steady_seconds)
    meter = C.CpuMeter(pid).start()
    await asyncio.gather(*(base_loop() for _ in range(16)))
    meter.stop()
    baseline = {
        "api": "ListConsumerGroup",
        "requests_per_s": count / meter.wall,
        **meter.summary(),
        "server_cpu_us_per_request": meter.cpu / count * 1e6,
    }
    return {
        "shards": n_shards,
        "consumers": n_consumers,
        "converge": converge,
        "steady": steady,
        "baseline_small_request": baseline,
    }


# -- driver -----------------------------------------------------------------------------------


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median of every numeric field over the repetitions; the runs are kept alongside."""
    out: dict[str, Any] = {}
    for key, value in runs[0].items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = statistics.median(r[key] for r in runs)
        else:
            out[key] = value
    out["runs"] = runs
    return out


async def http_phases(server: C.ServerProcess, args: argparse.Namespace) -> dict[str, Any]:
    assert server.proc is not None
    pid = server.proc.pid
    out: dict[str, Any] = {}
    reps = args.reps
    async with C.session() as s:
        sls = C.Sls(s, server.port, "bench")
        await sls.create_project()
        await sls.create_logstore(LOGSTORE_BIG, 4)
        await sls.create_logstore(LOGSTORE_SMALL, 4)
        # every LogGroup distinct (random ids, paths, ...): lz4 sees realistic ratios (~2-3x)
        print("building the data ...", flush=True)
        big = C.make_bodies(GROUP_SIZES[i % 4] for i in range(args.big_groups))
        small = C.make_bodies([10] * args.small_groups, seed=2)
        await C.put_all(sls, LOGSTORE_BIG, big[:40], 4)  # warm-up (not measured)
        await C.put_all(sls, LOGSTORE_SMALL, small[:400], 4)
        runs = []
        for i in range(reps):
            print(
                f"ingest {i + 1}/{reps}: {len(big)} LogGroups of {GROUP_SIZES} logs, lz4 ...",
                flush=True,
            )
            runs.append(await bench_ingest(sls, pid, LOGSTORE_BIG, big, 4))
        out["ingest_100_1000"] = summarise(runs)
        runs = []
        for i in range(reps):
            print(f"ingest {i + 1}/{reps}: {len(small)} LogGroups of 10 logs, lz4 ...", flush=True)
            runs.append(await bench_ingest(sls, pid, LOGSTORE_SMALL, small, 4))
        out["ingest_10"] = summarise(runs)
        out["pull"] = []
        # count=1000 as asked; big groups hit the server's 16 MiB answer cap, so also
        # count=100 (~1.6 MB answers) to show what the answer size costs per byte
        cases = [
            (LOGSTORE_BIG, "100-1000 logs/group", 1, "lz4", 1000),
            (LOGSTORE_BIG, "100-1000 logs/group", 1, "", 1000),
            (LOGSTORE_BIG, "100-1000 logs/group", 1, "lz4", 100),
            (LOGSTORE_SMALL, "10 logs/group", args.small_passes, "lz4", 1000),
            (LOGSTORE_SMALL, "10 logs/group", args.small_passes, "", 1000),
        ]
        for logstore, label, passes, accept, count in cases:
            runs = []
            for i in range(reps):
                print(
                    f"pull {i + 1}/{reps}: {label}, {accept or 'none'}, count={count}, "
                    f"{passes} pass(es) ...",
                    flush=True,
                )
                r = await bench_pull(sls, pid, logstore, 4, accept, passes, count)
                r["data"] = label
                runs.append(r)
            out["pull"].append(summarise(runs))
        print("heartbeats over HTTP: 1000 shards, 100 consumers ...", flush=True)
        out["http_heartbeats"] = await bench_http_heartbeats(sls, pid, 100, args.hb_seconds)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smaller data, for a smoke run")
    p.add_argument("--json", type=Path, help="also write the results here")
    p.add_argument("--keep", action="store_true", help="keep the server's data directory")
    args = p.parse_args()
    args.reps = 1 if args.quick else 3
    args.big_groups = 400 if args.quick else 1600  # per repetition: ~740 k logs, ~156 MB raw
    args.small_groups = 4000 if args.quick else 10000  # per repetition: 100 k logs
    args.small_passes = 1 if args.quick else 6
    args.hb_seconds = 2.0 if args.quick else 6.0
    args.steady_rounds = 3 if args.quick else 20

    results: dict[str, Any] = {"machine": C.machine_notes()}
    # 3. in-process coordinator first, pinned to core 0 (nothing else of ours runs there yet)
    C.pin_self(C.SERVER_CORE)
    results["coordinator"] = []
    for order in ("random", "sequential"):
        runs = []
        for i in range(args.reps):
            print(
                f"coordinator in process {i + 1}/{args.reps}: 1000 shards, 100 consumers, "
                f"{order} join order ...",
                flush=True,
            )
            runs.append(bench_coordinator(1000, 100, order, args.steady_rounds, seed=7 + i))
        summary = summarise(runs)
        summary["rounds_to_balanced_all_runs"] = [r["rounds_to_balanced"] for r in runs]
        results["coordinator"].append(summary)

    C.pin_self(C.LOAD_CORE)
    work = Path(tempfile.mkdtemp(prefix="loghubd-serverbench-"))
    server = C.start_server(work)
    try:
        results.update(asyncio.run(http_phases(server, args)))
    finally:
        server.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    report(results)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1))
    return 0


def cpu_note(x: dict[str, Any]) -> str:
    return (
        f"server CPU {x['server_cpu_util']:.0%}, load gen {x['loadgen_cpu_util']:.0%}, "
        f"others {x['other_processes_cores']:.1f} cores"
    )


def report(r: dict[str, Any]) -> None:
    f = C.fmt
    print("\n== loghubd serve, pinned to one core ==", r["machine"]["date"])
    for key, label in (("ingest_100_1000", "100-1000 logs/group"), ("ingest_10", "10 logs/group")):
        x = r[key]
        print(
            f"PutLogs lz4 {label:20}: {f(x['logs_per_s'])} logs/s, "
            f"{f(x['raw_MB_per_s'], 1)} MB/s raw ({f(x['wire_MB_per_s'], 1)} MB/s on the wire), "
            f"{f(x['requests_per_s'])} req/s, {cpu_note(x)}, "
            f"{f(x['logs_per_server_cpu_s'])} logs/server-CPU-s"
        )
    for x in r["pull"]:
        print(
            f"PullLogs {x['codec']:4} count={x['count']:<4} {x['data']:20}: "
            f"{f(x['raw_MB_per_s'], 1)} MB/s raw "
            f"({f(x['wire_MB_per_s'], 1)} on the wire), {f(x['pulls_per_s'], 1)} pulls/s of "
            f"{x['raw_MB_per_pull']:.2f} MB, {f(x['raw_MB_per_server_cpu_s'])} MB/server-CPU-s, "
            f"{cpu_note(x)}"
        )
    for x in r["coordinator"]:
        print(
            f"coordinator ({x['join_order']} join): balanced after "
            f"{x['rounds_to_balanced_all_runs']} rounds "
            f"(all told after {x['rounds_until_all_told']}), {x['transitions']} "
            f"transitions; converging {f(x['converging_heartbeat_us_mean'])} µs/heartbeat "
            f"(p99 {f(x['converging_heartbeat_us_p99'])}), steady "
            f"{f(x['steady_heartbeat_us_mean'])} µs (p99 {f(x['steady_heartbeat_us_p99'])}); "
            f"Group() construction alone {f(x['group_construct_us'])} µs"
        )
    h = r["http_heartbeats"]
    print(
        f"HTTP heartbeats ({h['shards']} shards, {h['consumers']} consumers): balanced after "
        f"{h['converge']['rounds_to_balanced']} rounds "
        f"({f(h['converge']['server_cpu_us_per_heartbeat'])} server-CPU-µs/heartbeat while "
        f"converging); steady {f(h['steady']['heartbeats_per_s'])} heartbeats/s "
        f"({f(h['steady']['heartbeats_per_server_cpu_s'])} per server-CPU-s), "
        f"{cpu_note(h['steady'])}, "
        f"{f(h['steady']['server_cpu_us_per_heartbeat'])} server-CPU-µs/heartbeat, "
        f"p50 {h['steady']['latency_ms_p50']:.1f} ms, p99 {h['steady']['latency_ms_p99']:.1f} ms"
    )
    b = h["baseline_small_request"]
    print(
        f"  baseline ListConsumerGroup: {f(b['requests_per_s'])} req/s, "
        f"{f(b['server_cpu_us_per_request'])} server-CPU-µs/request, "
        f"{cpu_note(b)}"
    )


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    raise SystemExit(main())
