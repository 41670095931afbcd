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
    Sls,
    machine_notes,
    make_bodies,
    make_log_group,
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


async def populate(port: int) -> dict[str, list[int]]:
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
        return held


def process_cpu(pid: int) -> float:
    """CPU seconds of process `pid` to the nanosecond: Linux's per-process CPU clock
    (clock_getcpuclockid's encoding), not /proc's 10 ms ticks (0.5 ms per refresh at 20
    requests: too coarse for a target of a few ms)."""
    return time.clock_gettime(((~pid) << 3) | 2)


class Changes:
    """What moves between two refreshes in the "changing" measurement: a producer writes a
    group of LOGS_PER_GROUP logs to the next shard, that shard's owner commits one group
    further, and the next consumer heartbeats (over HTTP to the server, or straight into an
    in-process service)."""

    def __init__(self, held: dict[str, list[int]]) -> None:
        self.held = held
        self.owner = {sh: name for name, shards in held.items() for sh in shards}
        self.position = dict.fromkeys(range(SHARDS), GROUPS_PER_SHARD // 2)
        self.body = make_bodies([LOGS_PER_GROUP], seed=7)[0]
        self.raw = make_log_group(LOGS_PER_GROUP, seed=7)
        self.i = 0

    def next(self) -> tuple[int, str, str, int]:
        """(shard, its hash key, a consumer to heartbeat, the shard's new checkpoint)."""
        shard = self.i % SHARDS
        self.position[shard] += 1
        self.i += 1
        return (
            shard,
            f"{shard * (1 << 128) // SHARDS:032x}",
            f"consumer-{self.i % CONSUMERS:03d}",
            self.position[shard],
        )

    async def over_http(self, sls: Sls) -> None:
        shard, key, beat, pos = self.next()
        await sls.put(LOGSTORE, self.body, key)
        await sls.json(
            "POST",
            f"/logstores/{LOGSTORE}/consumergroups/{GROUP}",
            {"type": "checkpoint", "consumer": self.owner[shard]},
            payload={"shard": shard, "checkpoint": cursors.from_seq(shard, pos)},
        )
        await sls.heartbeat(LOGSTORE, GROUP, beat, self.held[beat])

    def in_process(self, service: Any, ls: Any) -> None:
        shard, key, beat, pos = self.next()
        service.put(ls, self.raw, key)
        service.commit(ls, GROUP, self.owner[shard], shard, cursors.from_seq(shard, pos), False)
        service.heartbeat(ls, GROUP, beat, self.held[beat])


async def measure(
    port: int, pid: int, rounds: int, requests: int, changes: Changes
) -> dict[str, dict[str, list[float]]]:
    """Per page and round: `requests` refreshes of unchanged data ("cpu_ms"), then
    `requests` refreshes each after a change (`Changes`), and `requests` changes alone; the
    changing cost per refresh is (changes and refreshes - changes alone) / requests."""
    results: dict[str, dict[str, list[float]]] = {
        n: {"cpu_ms": [], "wall_ms": [], "bytes": [], "changing_cpu_ms": []} for n in pages()
    }
    async with session(limit=1) as s:
        base = f"http://127.0.0.1:{port}"
        sls = Sls(s, port, PROJECT)

        async def get(name: str, path: str, headers: dict[str, str]) -> int:
            async with s.get(base + path, headers=headers) as r:
                body = await r.read()
                assert r.status == 200, (name, r.status, body[:200])
                return len(body)

        for _ in range(rounds):
            for name, (path, region) in pages().items():
                headers = {REGION: region} if region else {}
                cpu0 = process_cpu(pid)
                size = 0
                t0 = time.perf_counter()
                for _i in range(requests):
                    size = await get(name, path, headers)
                wall = time.perf_counter() - t0
                cpu = process_cpu(pid) - cpu0
                both = process_cpu(pid)
                for _i in range(requests):
                    await changes.over_http(sls)
                    await get(name, path, headers)
                both = process_cpu(pid) - both
                alone = process_cpu(pid)
                for _i in range(requests):
                    await changes.over_http(sls)
                alone = process_cpu(pid) - alone
                results[name]["cpu_ms"].append(1000 * cpu / requests)
                results[name]["wall_ms"].append(1000 * wall / requests)
                results[name]["bytes"].append(size)
                results[name]["changing_cpu_ms"].append(1000 * (both - alone) / requests)
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

    changes = Changes(held)
    out: dict[str, dict[str, Any]] = {
        n: {"cpu_ms": [], "changing_cpu_ms": [], "bytes": 0} for n in pages()
    }
    try:
        for _ in range(rounds):
            for name, (path, region) in pages().items():
                t0 = time.process_time()
                for _i in range(requests):
                    size = render(path, region)
                out[name]["cpu_ms"].append(1000 * (time.process_time() - t0) / requests)
                out[name]["bytes"] = size
                spent = 0.0
                for _i in range(requests):  # a change before each refresh, not counted
                    changes.in_process(service, ls)
                    t0 = time.process_time()
                    render(path, region)
                    spent += time.process_time() - t0
                out[name]["changing_cpu_ms"].append(1000 * spent / requests)
        if profile:
            path, region = pages()[profile]
            for changing in (False, True):
                prof = cProfile.Profile()
                for _i in range(requests):
                    if changing:
                        changes.in_process(service, ls)
                    prof.enable()
                    render(path, region)
                    prof.disable()
                what = "changing" if changing else "unchanged"
                print(f"cProfile of {profile!r}, {requests} refreshes, {what}, by own time:")
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
            held = asyncio.run(populate(server.port))
            if not args.in_process_only:
                serve = asyncio.run(
                    measure(server.port, server.proc.pid, args.rounds, args.requests, Changes(held))
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
                "changing_cpu_ms": stats(r["changing_cpu_ms"]),
                "wall_ms": stats(r["wall_ms"]),
                "bytes": r["bytes"][-1],
            }
            for n, r in serve.items()
        },
        "serve in-process": {
            n: {
                "cpu_ms": stats(r["cpu_ms"]),
                "changing_cpu_ms": stats(r["changing_cpu_ms"]),
                "bytes": r["bytes"],
            }
            for n, r in local.items()
        },
        "daemon page (in-process)": {
            "cpu_ms": stats(daemon["cpu_ms"]),
            "bytes": daemon["bytes"][-1],
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))

    def row(name: str, c: dict[str, float], ch: dict[str, float] | None, tail: str) -> None:
        changing = f"{ch['min']:>7} {ch['median']:>7} {ch['max']:>7}" if ch else " " * 23
        print(f"{name:30} {c['min']:>7} {c['median']:>7} {c['max']:>7}   {changing} {tail}")

    print(
        f"{'CPU ms per refresh':30} {'unchanged: min/med/max':>23}   {'changing: min/med/max':>23}"
    )
    print("-- server (HTTP; wall ms median, KiB)")
    for name, r in report["serve"].items():
        w = r["wall_ms"]["median"]
        row(name, r["cpu_ms"], r["changing_cpu_ms"], f"{w:>7} {r['bytes'] / 1024:>5.0f}")
    print("-- in-process (reading + rendering, no HTTP; KiB)")
    for name, r in report["serve in-process"].items():
        row(name, r["cpu_ms"], r["changing_cpu_ms"], f"{r['bytes'] / 1024:>5.0f}")
    d = report["daemon page (in-process)"]
    row("daemon page", d["cpu_ms"], None, f"{d['bytes'] / 1024:>5.0f}")


if __name__ == "__main__":
    main()
