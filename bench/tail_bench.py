"""Tail mode: a steady live stream, the daemon and the official SDK consuming it at once
(issue #14 item 6).

    .venv/bin/python bench/tail_bench.py [--rate 20000] [--seconds 60] [--json FILE]
        [--only daemon|sdk] [--consumer 'idle_fetch_interval = 0.2'] [--jsonl 'fsync = "never"']
        [--producer-core consumers|server]

One `loghubd serve` alone on core 0 (as a remote service would be) and a 4-shard logstore.
Two consumers, each in its own consumer group and process (core 1), both writing JSON lines to
files, the same work: `loghubd run` with the `jsonl` processor (defaults), and the SDK's
ConsumerWorker with its dict per log and `json.dumps` of each (worker_pool_size 4,
data_fetch_interval 0.2 s, as issue #14 measured it). Once both have joined, the producer
writes `--rate` logs/s in log groups of 50 (lz4, PutLogs spread over the shards) for
`--seconds`. Each log group's topic carries its sequence number.

Measured per consumer: CPU seconds from the first write to the last log processed (utime +
stime from /proc) and logs per CPU-second; the latency from the write's acknowledgement (the
PutLogs answer) to the moment the group's lines appear in the consumer's output, p50 / p99 /
max over every group. A watcher thread in this process reads the appended output every 20 ms,
so latencies are late by up to 20 ms, for both alike. The same figures are also given
without the groups written in the first second, when both consumers were still at their
quiet-shard pace (they sit idle for a few seconds before the producer starts).

This script (the producer and the watchers, ~37 % of a core) runs on core 1 with the
consumers. With `--producer-core server` it runs beside the server instead, as it did until
the nineteenth session: the server's core then runs at ~90 %, and pulls wait in its queue
(the daemon's own pull durations, `daemon_durations_share_at_most_s`, show it: 100-250 ms
while the server's handlers take under 10 ms). Also reported: the daemon's pull and
processing durations and the server's PullLogs/PutLogs durations (from their histograms).

`--only` runs one consumer (to see what the other costs the machine); `--consumer` and
`--jsonl` add lines to the daemon's `[consumer]` and `[processor.jsonl]` tables.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C

from loghubd.protocol import compress as codec
from loghubd.protocol import pb

PROJECT = "tail"
LOGSTORE = "live"
SHARDS = 4
GROUP = 50
HERE = Path(__file__).resolve().parent
TOPIC = re.compile(rb'"__topic__": "g(\d+)"')


class Watcher(threading.Thread):
    """First time each group's lines are seen in a directory of `shard-*.jsonl` files."""

    def __init__(self, directory: Path) -> None:
        super().__init__(daemon=True)
        self.dir = directory
        self.seen: dict[int, float] = {}
        self.offsets: dict[Path, int] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.02):
            now = time.time()
            for path in self.dir.glob("shard-*.jsonl"):
                at = self.offsets.get(path, 0)
                with open(path, "rb") as f:
                    f.seek(at)
                    data = f.read()
                end = data.rfind(b"\n") + 1
                self.offsets[path] = at + end
                for m in TOPIC.finditer(data, 0, end):
                    self.seen.setdefault(int(m.group(1)), now)


def group_body(seq: int, template: bytes, raw_logs: int) -> C.Body:
    """The template log group with topic `g<seq>` (a field may come first on the wire)."""
    topic = f"g{seq}".encode()
    raw = b"\x1a" + pb.encode_varint(len(topic)) + topic + template
    return C.Body(len(raw), raw_logs, codec.compress(codec.LZ4, raw), codec.LZ4)


async def produce(
    port: int, rate: int, seconds: float, acks: dict[int, float], failed: list[str]
) -> None:
    group = pb.LogGroup.FromString(C.make_log_group(GROUP, seed=7))
    group.ClearField("Topic")  # each request's own topic goes in front
    template = group.SerializeToString()
    per_s = rate / GROUP
    total = int(per_s * seconds)
    keys = [f"{i:032x}" for i in range(0, 2**128, 2**128 // SHARDS)]
    async with C.session(limit=64) as s:
        sls = C.Sls(s, port, PROJECT)
        start = time.monotonic()
        pending: set[asyncio.Task[None]] = set()

        async def put(seq: int) -> None:
            try:
                await sls.put(LOGSTORE, group_body(seq, template, GROUP), keys[seq % SHARDS])
            except Exception as e:  # the server could not keep up: counted, not fatal
                failed.append(repr(e)[:200])
                return
            acks[seq] = time.time()

        for seq in range(total):
            delay = start + seq / per_s - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(put(seq))
            pending.add(task)
            task.add_done_callback(pending.discard)
        await asyncio.gather(*pending)


def setup(port: int) -> None:
    async def go() -> None:
        async with C.session() as s:
            sls = C.Sls(s, port, PROJECT)
            await sls.create_project()
            await sls.create_logstore(LOGSTORE, SHARDS)

    asyncio.run(go())


def start_daemon(
    work: Path, port: int, consumer: str = "", jsonl: str = ""
) -> tuple[subprocess.Popen[bytes], int]:
    cfg = work / "daemon.toml"
    ops = C.daemon_config(
        cfg,
        port=port,
        project=PROJECT,
        logstore=LOGSTORE,
        group="tail-daemon",
        name="daemon",
        processor="jsonl",
        options=f'path = "{work / "out-daemon"}"\n{jsonl}',
        consumer=consumer,
    )
    return C.spawn_daemon(cfg, work / "daemon.log", core=C.LOAD_CORE), ops


def start_sdk(work: Path, port: int) -> subprocess.Popen[bytes]:
    with open(work / "sdk.log", "ab") as log:
        return subprocess.Popen(
            [
                *("taskset", "-c", str(C.LOAD_CORE), sys.executable),
                str(HERE / "_sdk_consumer.py"),
                *("--port", str(port), "--project", PROJECT, "--logstore", LOGSTORE),
                *("--group", "tail-sdk", "--name", "sdk", "--expect", str(10**12)),
                *("--fetch-interval", "0.2", "--pool", "4", "--max-groups", "1000"),
                *("--jsonl", str(work / "out-sdk")),
            ],
            stdout=subprocess.DEVNULL,
            stderr=log,
            cwd=work,
        )


def joined(port: int, group: str) -> bool:
    async def go() -> bool:
        async with C.session() as s:
            sls = C.Sls(s, port, PROJECT)
            try:
                status = await sls.group_status(LOGSTORE, group)
            except Exception:
                return False
            shards = status.get("shards", [])
            return len(shards) == SHARDS and all(s["owner"] for s in shards)

    return asyncio.run(go())


def metrics_text(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text: str = resp.read().decode()
    return text


def cumulative_shares(text: str, name: str, having: str = "") -> dict[str, float]:
    """A Prometheus histogram summed over its label sets (those whose labels contain
    `having`): bucket bound (s) → the share of observations at most that long."""
    buckets: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(f"{name}_bucket{{") and having in line:
            head, _, value = line.rpartition(" ")
            le = head.split('le="', 1)[1].split('"', 1)[0]
            buckets[le] = buckets.get(le, 0.0) + float(value)
    total = buckets.get("+Inf", 0.0)
    return {le: round(n / total, 4) for le, n in buckets.items()} if total else {}


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=int, default=20_000)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--json", default="")
    ap.add_argument(
        "--consumer",
        default="",
        help="extra lines for the daemon's [consumer] table, e.g. 'idle_fetch_interval = 0.2'",
    )
    ap.add_argument(
        "--jsonl",
        default="",
        help="extra lines for the daemon's [processor.jsonl] table, e.g. 'fsync = \"never\"'",
    )
    ap.add_argument(
        "--producer-core",
        choices=("server", "consumers"),
        default="consumers",
        help="where this script (the producer and the watchers, ~37 %% of a core) runs: "
        "beside the consumers (default: the server alone, as a remote service) or beside "
        "the server (its core then runs at ~90 %%, and every pull waits in its queue)",
    )
    ap.add_argument(
        "--only",
        default="daemon,sdk",
        help="which consumers run (default both: the comparison needs both in one run)",
    )
    ap.add_argument("--keep", action="store_true", help="keep the work directory (outputs, logs)")
    args = ap.parse_args()
    kinds = args.only.split(",")
    if not kinds or set(kinds) - {"daemon", "sdk"}:
        ap.error(f"--only: daemon and/or sdk, not {args.only!r}")
    work = Path(tempfile.mkdtemp(prefix="tail-bench-"))
    server = C.start_server(work)
    assert server.proc is not None
    # The producer and the watchers: beside the server (its core then runs at ~90 %), or
    # beside the consumers (the server alone on its core, as a remote service would be).
    C.pin_self(C.SERVER_CORE if args.producer_core == "server" else C.LOAD_CORE)
    setup(server.port)
    procs: dict[str, subprocess.Popen[bytes]] = {}
    ops = 0
    if "daemon" in kinds:
        procs["daemon"], ops = start_daemon(work, server.port, args.consumer, args.jsonl)
    if "sdk" in kinds:
        procs["sdk"] = start_sdk(work, server.port)
    try:
        deadline = time.monotonic() + 60
        while not all(joined(server.port, f"tail-{name}") for name in procs):
            if time.monotonic() > deadline:
                raise RuntimeError(f"consumers did not join; see {work}")
            time.sleep(0.5)
        time.sleep(3)  # both idle-polling
        (work / "out-sdk").mkdir(exist_ok=True)
        (work / "out-daemon").mkdir(exist_ok=True)
        watchers = {name: Watcher(work / f"out-{name}") for name in procs}
        for w in watchers.values():
            w.start()
        cpu0 = {name: C.cpu_seconds(p.pid) for name, p in procs.items()}
        server0 = C.cpu_seconds(server.proc.pid)
        own0 = time.process_time()  # the producer and the watchers, on the server's core
        acks: dict[int, float] = {}
        failed: list[str] = []
        t0 = time.time()
        asyncio.run(produce(server.port, args.rate, args.seconds, acks, failed))
        t_written = time.time()
        groups = len(acks)
        cpu: dict[str, float] = {}
        deadline = time.monotonic() + 60
        while len(cpu) < len(procs) and time.monotonic() < deadline:
            time.sleep(0.05)
            for name, w in watchers.items():
                if name not in cpu and len(w.seen) >= groups:
                    cpu[name] = C.cpu_seconds(procs[name].pid) - cpu0[name]
        server_cpu = C.cpu_seconds(server.proc.pid) - server0
        own_cpu = time.process_time() - own0
        for w in watchers.values():
            w.stop.set()
        # Where the daemon's share of the latency goes: its pulls' and its processor's
        # durations over the whole run (idle start included), from its own histograms.
        daemon_durations = (
            {
                what: cumulative_shares(metrics_text(ops), f"loghubd_{what}_duration_seconds")
                for what in ("fetch", "process")
            }
            if ops
            else {}
        )
        server_text = metrics_text(server.port)
        server_durations = {
            api: cumulative_shares(
                server_text, "loghubd_server_request_duration_seconds", f'api="{api}"'
            )
            for api in ("PullLogs", "PutLogs")
        }
        logs = groups * GROUP
        rows: dict[str, Any] = {}
        for name, w in watchers.items():
            lat = [w.seen[s] - acks[s] for s in acks if s in w.seen]
            # Without the groups written in the first second: the consumers sat idle before
            # it, so their pause had grown to the quiet-shard pace (the SDK's 0.5 s, the
            # daemon's `idle_fetch_interval`). What a stream that keeps flowing sees.
            steady = [w.seen[s] - acks[s] for s in acks if s in w.seen and acks[s] >= t0 + 1]
            per_second: dict[int, list[float]] = {}
            for seq in acks:
                if seq in w.seen:
                    per_second.setdefault(int(acks[seq] - t0), []).append(w.seen[seq] - acks[seq])
            rows[name] = {
                "p50_ms_by_second": [
                    round(1000 * statistics.median(v)) for _k, v in sorted(per_second.items())
                ],
                "groups_seen": len(w.seen),
                "cpu_s": round(cpu.get(name, float("nan")), 2),
                "logs_per_cpu_s": round(logs / cpu[name]) if name in cpu else None,
                "latency_ms": {
                    "p50": round(1000 * statistics.median(lat), 1),
                    "p99": round(1000 * pct(lat, 0.99), 1),
                    "max": round(1000 * max(lat), 1),
                },
                "latency_ms_quantiles": {
                    f"p{q:g}": round(1000 * pct(lat, q / 100), 1)
                    for q in (10, 25, 75, 90, 95, 97.5, 99.5, 99.9)
                },
                "latency_ms_after_the_first_second": {
                    "p50": round(1000 * statistics.median(steady), 1),
                    "p99": round(1000 * pct(steady, 0.99), 1),
                    "max": round(1000 * max(steady), 1),
                },
            }
        if "daemon" in cpu and "sdk" in cpu:
            rows["daemon_cpu_vs_sdk"] = round(cpu["daemon"] / cpu["sdk"], 3)
        report = {
            "machine": C.machine_notes(),
            "daemon_consumer_options": args.consumer,
            "daemon_jsonl_options": args.jsonl,
            "producer_core": args.producer_core,
            "rate": args.rate,
            "seconds": args.seconds,
            "logs": logs,
            "write_seconds": round(t_written - t0, 1),
            "failed_writes": len(failed),
            "first_failures": failed[:3],
            "server_cpu_share": round(server_cpu / (time.time() - t0), 3),
            "producer_and_watchers_cpu_share": round(own_cpu / (time.time() - t0), 3),
            "consumers": rows,
            "daemon_durations_share_at_most_s": daemon_durations,
            "server_durations_share_at_most_s": server_durations,
        }
        print(json.dumps(report, indent=1))
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=1))
    finally:
        for p in procs.values():
            p.send_signal(signal.SIGKILL)
            p.wait()
        server.stop()
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)  # gigabytes of output
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
