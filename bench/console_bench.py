"""What one refresh of each console page costs: 256 shards, 100 consumers (issue #17).

Serve pages: a real `loghubd serve` (pinned to core 0) holds a logstore of 256 shards, 8 log
groups of 20 logs in each, and a consumer group whose 100 consumers hold the shards with
checkpoints half-way. This script (core 1) asks for each page as the live script does (the
region alone, header X-Console-Region) and as a whole page, one request at a time, and reads
the server's CPU time from /proc: CPU ms per refresh = server CPU / requests. Repetitions are
interleaved (every page once per round) and reported as min / median / max.

Daemon page: built in-process (no daemon holds 256 shards here) from a `DaemonSnapshot` of
256 shards and a full three-minute history, timing the same functions the ops listener
calls.

    .venv/bin/python bench/console_bench.py [--rounds 5] [--requests 20] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import (
    ROOT,
    CpuMeter,
    Sls,
    machine_notes,
    make_bodies,
    pin_self,
    session,
    start_server,
)

sys.path.insert(0, str(ROOT))

from loghubd.console import daemon_pages
from loghubd.console import html as H
from loghubd.console.daemon_app import FRAME
from loghubd.console.daemon_data import History
from loghubd.consumer.snapshot import (
    DaemonSnapshot,
    HeartbeatSnapshot,
    ShardSnapshot,
    SourceSnapshot,
)
from loghubd.protocol import cursor as cursors

SHARDS = 256
CONSUMERS = 100
GROUPS_PER_SHARD = 8
LOGS_PER_GROUP = 20
PROJECT, LOGSTORE, GROUP = "bench", "wide", "readers"
REGION = "X-Console-Region"


def pages() -> dict[str, tuple[str, str | None]]:
    """name → (path, region or None for the whole page)."""
    ls = f"/console/p/{PROJECT}/l/{LOGSTORE}"
    spl = "*%20%7C%20where%20level%20%3D%20%27ERROR%27"
    return {
        "index (page)": ("/console", None),
        "logstore shards (region)": (ls, "shards"),
        "logstore (page)": (ls, None),
        "group (region)": (ls + f"/g/{GROUP}", "group"),
        "group (page)": (ls + f"/g/{GROUP}", None),
        "tail logstore (region)": (ls + "/tail", "tail"),
        "tail logstore + SPL (region)": (ls + f"/tail?q={spl}", "tail"),
        "tail one shard (region)": (ls + "/tail?shard=7", "tail"),
    }


async def populate(port: int) -> None:
    async with session(limit=8) as s:
        sls = Sls(s, port, PROJECT)
        await sls.create_project()
        await sls.create_logstore(LOGSTORE, SHARDS)
        bodies = make_bodies([LOGS_PER_GROUP] * GROUPS_PER_SHARD)
        jobs = [
            (f"{i * (1 << 128) // SHARDS:032x}", body) for body in bodies for i in range(SHARDS)
        ]

        async def put(chunk: list[tuple[str, Any]]) -> None:
            for key, body in chunk:
                await sls.put(LOGSTORE, body, key)

        await asyncio.gather(*(put(jobs[i::8]) for i in range(8)))
        await sls.create_group(LOGSTORE, GROUP, 3600)
        held: dict[str, list[int]] = {f"consumer-{c:03d}": [] for c in range(CONSUMERS)}
        for _round in range(4):  # until every shard has been handed over and taken
            for name in held:
                held[name] = await sls.heartbeat(LOGSTORE, GROUP, name, held[name])
        half = cursors.from_seq
        for name, shards in held.items():
            for shard in shards:
                await sls.json(
                    "POST",
                    f"/logstores/{LOGSTORE}/consumergroups/{GROUP}",
                    {"type": "checkpoint", "consumer": name},
                    payload={"shard": shard, "checkpoint": half(shard, GROUPS_PER_SHARD // 2)},
                )
        assert sum(len(v) for v in held.values()) == SHARDS, "not every shard is held"


async def measure(port: int, pid: int, rounds: int, requests: int) -> dict[str, Any]:
    results: dict[str, dict[str, list[float]]] = {
        n: {"cpu_ms": [], "wall_ms": [], "bytes": []} for n in pages()
    }
    async with session(limit=1) as s:
        base = f"http://127.0.0.1:{port}"
        for _ in range(rounds):
            for name, (path, region) in pages().items():
                headers = {REGION: region} if region else {}
                meter = CpuMeter(pid).start()
                size = 0
                t0 = time.perf_counter()
                for _i in range(requests):
                    async with s.get(base + path, headers=headers) as r:
                        body = await r.read()
                        assert r.status == 200, (name, r.status, body[:200])
                        size = len(body)
                wall = time.perf_counter() - t0
                meter.stop()
                results[name]["cpu_ms"].append(1000 * meter.cpu / requests)
                results[name]["wall_ms"].append(1000 * wall / requests)
                results[name]["bytes"].append(size)
    return results


def daemon_page(rounds: int, requests: int) -> dict[str, list[float]]:
    """The daemon page with 256 shards and a full history, in-process."""

    def snapshot(when: float, i: int) -> DaemonSnapshot:
        shards = tuple(
            ShardSnapshot(
                shard=s,
                state="consuming",
                reason="",
                processor_error="",
                cursor="",
                checkpoint=None,
                caught_up=s % 2 == 0,
                lag_log_groups=s % 7,
                lag_seconds=float(s % 5),
                cursor_time=None if s % 2 == 0 else when - float(s % 5),
                seconds_since_progress=0.0,
                seconds_since_pull=0.0,
                checkpoint_age=0.0,
                batches=i,
                logs=i * 100 + s,
                bytes=0,
                last_error=None,
            )
            for s in range(SHARDS)
        )
        source = SourceSnapshot(
            name="default",
            state="running",
            error="",
            consumer="bench",
            group=GROUP,
            endpoint="http://127.0.0.1:7100",
            project=PROJECT,
            logstore=LOGSTORE,
            credentials={},
            shard_filter=None,
            end=None,
            starting=False,
            heartbeat=HeartbeatSnapshot(
                joined=True, seconds_since_ok=0.5, interval=1.0, timeout=4.0, last_error=""
            ),
            held=tuple(range(SHARDS)),
            assigned_outside_filter=(),
            shards=shards,
            taken_at=when,
        )
        return DaemonSnapshot(
            consumer="bench", sources=(source,), ready=True, reasons=(), taken_at=when
        )

    history = History()
    now = time.time()
    for i in range(history.keep):
        history.record(snapshot(now - 2 * (history.keep - i), i))
    last = snapshot(now, history.keep)
    out: dict[str, list[float]] = {"cpu_ms": [], "bytes": []}
    for _ in range(rounds):
        t0 = time.process_time()
        for _i in range(requests):
            view = daemon_pages.daemon(last, history, {"default": "jsonl"}, "x")
            doc = H.page(FRAME, view.title, view.markup())
        out["cpu_ms"].append(1000 * (time.process_time() - t0) / requests)
        out["bytes"].append(len(doc))
    return out


def in_process(
    data_dir: Path, rounds: int, requests: int, profile: str | None
) -> dict[str, dict[str, Any]]:
    """Each serve page built in this process from the server's data (after it stopped), with
    the consumers' heartbeats replayed into a fresh `LogService`: CPU (process_time) per
    refresh of the console's own work (reading and rendering; not HTTP), min/median/max
    over interleaved rounds. `profile`: print a cProfile of that page (by own time)."""
    import cProfile
    import pstats
    from urllib.parse import parse_qsl, unquote, urlsplit

    from loghubd.console import access as A
    from loghubd.console import serve_app
    from loghubd.server.service import LogService
    from loghubd.server.storage import Storage

    db = data_dir / "loghubd.sqlite3"
    storage = Storage(db)
    service = LogService(storage, time.time)
    ls = storage.get_logstore(PROJECT, LOGSTORE)
    assert ls is not None
    held: dict[str, list[int]] = {f"consumer-{c:03d}": [] for c in range(CONSUMERS)}
    for _round in range(4):
        for name in held:
            held[name] = service.heartbeat(ls, GROUP, name, held[name])
    assert sum(len(v) for v in held.values()) == SHARDS, "not every shard is held"
    console = serve_app.ServeConsole(
        serve_app.Reader(service, db), A.Gate({}, "", False, b"k" * 32)
    )

    def render(path: str, region: str | None) -> int:
        url = urlsplit(path)
        parts = [unquote(p) for p in url.path[len(serve_app.PREFIX) :].split("/") if p]
        view = console.page(parts, dict(parse_qsl(url.query)), A.ANONYMOUS)
        if region is not None:
            return len(view.regions[region].encode())
        doc = H.page(serve_app.FRAME, view.title, view.markup(), crumbs=view.crumbs)
        return len(doc.encode())

    out: dict[str, dict[str, Any]] = {n: {"cpu_ms": [], "bytes": 0} for n in pages()}
    try:
        for _ in range(rounds):
            for name, (path, region) in pages().items():
                t0 = time.process_time()
                for _i in range(requests):
                    size = render(path, region)
                out[name]["cpu_ms"].append(1000 * (time.process_time() - t0) / requests)
                out[name]["bytes"] = size
        if profile:
            path, region = pages()[profile]
            prof = cProfile.Profile()
            prof.enable()
            for _i in range(requests):
                render(path, region)
            prof.disable()
            print(f"cProfile of {profile!r}, {requests} refreshes, by own time:")
            pstats.Stats(prof).sort_stats("tottime").print_stats(25)
            pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
    finally:
        console.reader.close()
        storage.close()
    return out


def stats(xs: list[float]) -> dict[str, float]:
    s = sorted(xs)
    return {"min": round(s[0], 2), "median": round(s[len(s) // 2], 2), "max": round(s[-1], 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "console.json")
    ap.add_argument(
        "--profile", choices=list(pages()), help="also print a cProfile of this page, in-process"
    )
    ap.add_argument(
        "--in-process-only", action="store_true", help="skip the HTTP measurement (profiling)"
    )
    args = ap.parse_args()
    pin_self(1)
    serve: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(Path(tmp))
        try:
            assert server.proc is not None
            asyncio.run(populate(server.port))
            if not args.in_process_only:
                serve = asyncio.run(
                    measure(server.port, server.proc.pid, args.rounds, args.requests)
                )
        finally:
            server.kill()
        local = in_process(server.data_dir, args.rounds, args.requests, args.profile)
    daemon = daemon_page(args.rounds, args.requests)
    report = {
        "machine": machine_notes(),
        "shards": SHARDS,
        "consumers": CONSUMERS,
        "rounds": args.rounds,
        "requests_per_round": args.requests,
        "serve": {
            n: {
                "cpu_ms": stats(r["cpu_ms"]),
                "wall_ms": stats(r["wall_ms"]),
                "bytes": r["bytes"][-1],
            }
            for n, r in serve.items()
        },
        "serve in-process": {
            n: {"cpu_ms": stats(r["cpu_ms"]), "bytes": r["bytes"]} for n, r in local.items()
        },
        "daemon page (in-process)": {
            "cpu_ms": stats(daemon["cpu_ms"]),
            "bytes": daemon["bytes"][-1],
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(f"{'page':34} {'server CPU ms/refresh min/med/max':>34} {'wall ms med':>12} {'KiB':>6}")
    for name, r in report["serve"].items():
        c, w = r["cpu_ms"], r["wall_ms"]
        print(
            f"{name:34} {c['min']:>10} {c['median']:>10} {c['max']:>10}"
            f" {w['median']:>12} {r['bytes'] / 1024:>6.0f}"
        )
    print(f"\n{'in-process (reading + rendering)':34} {'CPU ms/refresh min/med/max':>34}")
    for name, r in report["serve in-process"].items():
        c = r["cpu_ms"]
        print(
            f"{name:34} {c['min']:>10} {c['median']:>10} {c['max']:>10}"
            f" {'':>12} {r['bytes'] / 1024:>6.0f}"
        )
    d = report["daemon page (in-process)"]
    print(
        f"{'daemon page (in-process)':34} {d['cpu_ms']['min']:>10} {d['cpu_ms']['median']:>10}"
        f" {d['cpu_ms']['max']:>10} {'':>12} {d['bytes'] / 1024:>6.0f}"
    )


if __name__ == "__main__":
    main()
