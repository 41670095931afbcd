"""cProfile of a real `loghubd serve` process under one load, to see where its CPU goes.

    .venv/bin/python bench/profile_server.py ingest10|ingest1000|pull|heartbeat [--top 25]

The server runs as `python -m cProfile -o FILE -m loghubd serve ...` pinned to core 0 (it is
single-threaded asyncio, so the profile covers all of its request handling); this script
drives the load from core 1, stops the server with SIGTERM (the profile is written on the
clean exit) and prints the top functions by own time and by cumulative time. cProfile slows
Python code down, so read shares, not absolute times.

- ingest10: 20,000 PutLogs of 10-log groups (lz4)
- ingest1000: 600 PutLogs of 1000-log groups (lz4)
- pull: 20,000 10-log groups (loaded by an unprofiled server first) read 10 times with
  count=1000, lz4
- heartbeat: 1,000 shards, 100 consumers heartbeating back to back for 5 s (after balancing)
"""

from __future__ import annotations

import argparse
import asyncio
import pstats
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C
import server_bench as SB


def make_data(scenario: str) -> list[C.Body]:
    if scenario.startswith("ingest") or scenario == "pull":
        n, size = (600, 1000) if scenario == "ingest1000" else (20000, 10)
        return C.make_bodies([size] * n)
    return []


async def load(port: int, scenario: str, bodies: list[C.Body]) -> None:
    async with C.session() as s:
        sls = C.Sls(s, port, "prof")
        await sls.create_project()
        if scenario.startswith("ingest"):
            await sls.create_logstore("ls", 4)
            await C.put_all(sls, "ls", bodies, 4)
        elif scenario == "pull":  # the data was loaded by an unprofiled server
            for _ in range(10):
                await _pull_all(sls, "lz4")
        elif scenario == "heartbeat":
            await SB.bench_http_heartbeats(sls, _server_pid, 100, 5.0)


async def _pull_all(sls: C.Sls, accept: str) -> None:
    async def one(shard: int) -> None:
        cursor = await sls.cursor("ls", shard, "begin")
        end = await sls.cursor("ls", shard, "end")
        while cursor != end:
            cursor, *_ = await sls.pull("ls", shard, cursor, 1000, accept)

    await asyncio.gather(*(one(s) for s in range(4)))


_server_pid = 0


def main() -> int:
    global _server_pid
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("scenario", choices=["ingest10", "ingest1000", "pull", "heartbeat"])
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--out", type=Path, help="keep the .prof file here")
    args = p.parse_args()
    C.pin_self(C.LOAD_CORE)
    bodies = make_data(args.scenario)  # before the server starts: not in its profile
    work = Path(tempfile.mkdtemp(prefix="loghubd-profserver-"))
    prof = args.out or work / "server.prof"
    port = C.free_port()
    if args.scenario == "pull":  # load the data first, through a server that is not profiled
        loader = C.ServerProcess(work / "data", port=port, log_path=work / "loader.log").start()

        async def preload() -> None:
            async with C.session() as s:
                sls = C.Sls(s, port, "prof")
                await sls.create_project()
                await sls.create_logstore("ls", 4)
                await C.put_all(sls, "ls", bodies, 4)

        asyncio.run(preload())
        loader.stop()
    log = open(work / "server.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [
            "taskset",
            "-c",
            str(C.SERVER_CORE),
            sys.executable,
            "-m",
            "cProfile",
            "-o",
            str(prof),
            "-m",
            "loghubd",
            "--log-format",
            "json",
            "serve",
            "--data-dir",
            str(work / "data"),
            "--port",
            str(port),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    _server_pid = proc.pid
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError((work / "server.log").read_text()) from None
                time.sleep(0.05)
        t = time.perf_counter()
        cpu0 = C.cpu_seconds(proc.pid)
        asyncio.run(load(port, args.scenario, bodies))
        print(
            f"load done in {time.perf_counter() - t:.1f} s, server CPU "
            f"{C.cpu_seconds(proc.pid) - cpu0:.1f} s (under cProfile)"
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    stats = pstats.Stats(str(prof))
    stats.sort_stats("tottime").print_stats(args.top)
    stats.sort_stats("cumulative").print_stats(args.top)
    if not args.out:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
