"""What a consumer costs while there is nothing to read: the daemon against the official SDK.

Most shards are quiet most of the time, and a consumer that keeps polling them pays for every
empty pull, as does the service. One `loghubd serve` holds a logstore of S shards with no
data. Each repetition starts one consumer in a fresh group, waits until it has joined and
settled (`SETTLE_S`: the SDK takes its shards over its first heartbeats), then measures over
a window of `--window` seconds:

- the consumer's CPU (its process tree), as a percentage of one core;
- the server's CPU meanwhile, and the PullLogs requests it answered (from its /metrics).

The daemon runs `null` with defaults (`fetch_interval` 0.2 s, `idle_fetch_interval` 0.5 s);
"daemon-poll" the same with `idle_fetch_interval` 0.2 s (a pull every 0.2 s however long a
shard stays quiet: the daemon before that key); the SDK runs ConsumerWorker counting logs
(bench/_sdk_consumer.py) with `data_fetch_interval` 0.2 s, as the other benchmarks run it.
The three alternate within each round (reversed every other round); each round does every
shard count.

    .venv/bin/python bench/idle_bench.py [--shards 8,64] [--rounds 3] [--window 20]
        -> bench/results/idle_bench.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import _common as C
from daemon_procs import Consumer, Daemon

HERE = Path(__file__).resolve().parent
PROJECT = "idlebench"
SETTLE_S = 8.0
KINDS = ("daemon", "daemon-poll", "sdk")


def spawn(kind: str, work: Path, port: int, logstore: str, group: str) -> Consumer:
    log = work / f"{group}.log"
    t = time.time()
    if kind.startswith("daemon"):
        config = work / f"{group}.toml"
        # "daemon-poll": every 0.2 s however long the shard stays quiet (as before
        # `idle_fetch_interval`, which defaults to 0.5 s and is what "daemon" runs with).
        extra = "idle_fetch_interval = 0.2" if kind == "daemon-poll" else ""
        ops = C.daemon_config(
            config,
            port=port,
            project=PROJECT,
            logstore=logstore,
            group=group,
            processor="null",
            consumer=extra,
        )
        daemon = Daemon(C.spawn_daemon(config, log), t, ops)
        deadline = time.monotonic() + 60
        while not daemon.ready():  # joined: /readyz answers 200
            if time.monotonic() > deadline:
                daemon.stop(signal.SIGKILL)
                raise RuntimeError(f"{group}: not ready within 60 s, see {log}")
            time.sleep(0.1)
        return daemon
    cmd = [
        sys.executable,
        str(HERE / "_sdk_consumer.py"),
        *("--port", str(port), "--project", PROJECT, "--logstore", logstore),
        *("--group", group, "--name", group, "--expect", str(10**12)),
        *("--fetch-interval", "0.2"),
    ]
    with open(log, "ab") as err:
        proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=err, cwd=work, env=C.loopback_env()
        )
    return Consumer(proc, t)


def measure(
    kind: str, work: Path, server: C.ServerProcess, logstore: str, tag: str, window: float
) -> dict[str, Any]:
    assert server.proc is not None
    group = f"{kind}-{tag}"
    consumer = spawn(kind, work, server.port, logstore, group)
    try:
        time.sleep(SETTLE_S)
        if consumer.proc.poll() is not None:
            raise RuntimeError(f"{group} exited with {consumer.proc.returncode}: see {group}.log")
        cpu0, srv0, pulls0 = (
            C.tree_cpu(consumer.pid),
            C.cpu_seconds(server.proc.pid),
            C.pulls_answered(server),
        )
        t0 = time.monotonic()
        time.sleep(window)
        cpu1, srv1, pulls1 = (
            C.tree_cpu(consumer.pid),
            C.cpu_seconds(server.proc.pid),
            C.pulls_answered(server),
        )
        wall = time.monotonic() - t0
    finally:
        consumer.stop()
    return {
        "kind": kind,
        "consumer_core_pct": round(100 * (cpu1 - cpu0) / wall, 2),
        "server_core_pct": round(100 * (srv1 - srv0) / wall, 2),
        "pulls_per_s": round((pulls1 - pulls0) / wall, 1),
        "consumer_cpu_ms_per_pull": round(1000 * (cpu1 - cpu0) / max(pulls1 - pulls0, 1), 3),
    }


def spread(xs: list[float]) -> list[float]:
    return [min(xs), round(C.median(xs), 3), max(xs)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shards", default="8,64", help="shard counts, comma-separated")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--window", type=float, default=20.0, help="seconds measured per run")
    ap.add_argument("--out", default=str(HERE / "results" / "idle_bench.json"))
    args = ap.parse_args()
    shard_counts = [int(s) for s in args.shards.split(",")]
    # Stopped with SIGTERM (kill, timeout): unwind, so that the `finally`s stop the consumer
    # and the server. Left running, they skew whatever is measured next.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    machine = C.machine_notes()
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="idle-bench-") as tmp:
        work = Path(tmp)
        server = C.start_server(work, core=None)
        try:

            async def setup() -> None:
                async with C.session() as s:
                    sls = C.Sls(s, server.port, PROJECT)
                    await sls.create_project()
                    for n in shard_counts:
                        await sls.create_logstore(f"quiet{n}", n)

            asyncio.run(setup())
            for r in range(args.rounds):
                for n in shard_counts:
                    kinds = KINDS if r % 2 == 0 else KINDS[::-1]
                    for kind in kinds:
                        row = measure(kind, work, server, f"quiet{n}", f"{n}-{r}", args.window)
                        row.update(shards=n, round=r)
                        runs.append(row)
                        print(json.dumps(row), flush=True)
        finally:
            server.stop()
    summary: dict[str, Any] = {}
    for n in shard_counts:
        for kind in KINDS:
            rs = [x for x in runs if x["shards"] == n and x["kind"] == kind]
            summary[f"{kind}-{n}"] = {
                key: spread([x[key] for x in rs])
                for key in (
                    "consumer_core_pct",
                    "server_core_pct",
                    "pulls_per_s",
                    "consumer_cpu_ms_per_pull",
                )
            }
        for daemon in ("daemon", "daemon-poll"):
            pairs = [
                (d["consumer_core_pct"], s["consumer_core_pct"])
                for d in runs
                for s in runs
                if d["kind"] == daemon
                and s["kind"] == "sdk"
                and d["shards"] == s["shards"] == n
                and d["round"] == s["round"]
            ]
            summary[f"{daemon}_over_sdk_cpu-{n}"] = spread([round(d / s, 3) for d, s in pairs if s])
    doc = {
        "when": datetime.now().isoformat(timespec="seconds"),
        "machine": machine,
        "window_s": args.window,
        "runs": runs,
        "summary": summary,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
