"""Time from `loghubd run`'s process start to its first committed checkpoint, and its parts.

One `loghubd serve` with a logstore of 8 shards holding a small backlog (2,000 logs). Each
repetition starts a daemon with a fresh group (`null` processor, defaults otherwise: the
checkpoint interval is 5 s), polls the server's GetCheckPoint every 10 ms until a shard has
a checkpoint, and takes the parts from the daemon's JSON log timestamps:

- interpreter start and imports, up to the ops listener (`ops_listening`);
- the consumer group ensured (`consumer_started`), the first heartbeat's answer
  (`assignment_changed`), the first shard started (`shard_started`: checkpoint looked up,
  processor initialized);
- from there to the first checkpoint the server holds (the shard's pulls, the batch
  processed, the commit).

Alongside, `python -c "import loghubd.app"` is timed (the import floor).

    .venv/bin/python bench/first_checkpoint.py [--reps 5] -> bench/results/first_checkpoint.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import _common as C

PROJECT = "firstcp"
LOGSTORE = "fc"


async def first_checkpoint(port: int, group: str, deadline: float) -> float:
    """Wall-clock time when the group first has a checkpoint (polled every 10 ms)."""
    async with C.session() as s:
        sls = C.Sls(s, port, PROJECT)
        while time.time() < deadline:
            status, _h, body = await sls.call(
                "GET", f"/logstores/{LOGSTORE}/consumergroups/{group}", ok=(200, 404)
            )
            if status == 200 and any(cp.get("checkpoint") for cp in json.loads(body or b"[]")):
                return time.time()
            await asyncio.sleep(0.01)
    raise TimeoutError("no checkpoint")


def events(log: Path) -> dict[str, float]:
    """First wall-clock time of each event in a daemon's JSON log."""
    out: dict[str, float] = {}
    for line in log.read_text().splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        name = e.get("event")
        if name and name not in out and "timestamp" in e:
            out[name] = datetime.fromisoformat(e["timestamp"].replace("Z", "+00:00")).timestamp()
    return out


def one(work: Path, port: int, rep: int) -> dict[str, float]:
    group = f"g{rep}-{time.monotonic_ns()}"
    cfg = work / f"{group}.toml"
    C.daemon_config(
        cfg, port=port, project=PROJECT, logstore=LOGSTORE, group=group, processor="null"
    )
    log = work / f"{group}.log"
    t0 = time.time()
    proc = C.spawn_daemon(cfg, log)
    try:
        t_cp = asyncio.run(first_checkpoint(port, group, t0 + 60))
    finally:
        proc.terminate()
        proc.wait(30)
    ev = events(log)
    marks = [
        ("start_to_ops_listening", "ops_listening"),
        ("to_consumer_started", "consumer_started"),
        ("to_assignment", "assignment_changed"),
        ("to_shard_started", "shard_started"),
    ]
    row: dict[str, float] = {}
    prev = t0
    for key, name in marks:
        row[key] = round(ev[name] - prev, 3)
        prev = ev[name]
    row["to_first_checkpoint"] = round(t_cp - prev, 3)
    row["total"] = round(t_cp - t0, 3)
    return row


def import_floor(reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import loghubd.app"], check=True)
        times.append(time.perf_counter() - t)
    return round(statistics.median(times), 3)


async def load(port: int) -> None:
    async with C.session() as s:
        sls = C.Sls(s, port, PROJECT)
        await sls.create_project()
        await sls.create_logstore(LOGSTORE, 8)
        await C.put_all(sls, LOGSTORE, C.make_bodies([50] * 40, seed=5), 4)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", default=str(C.ROOT / "bench" / "results" / "first_checkpoint.json"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="first-cp-") as tmp:
        work = Path(tmp)
        server = C.start_server(work, core=None)
        try:
            asyncio.run(load(server.port))
            rows = []
            for rep in range(args.reps):
                rows.append(one(work, server.port, rep))
                print(json.dumps(rows[-1]))
        finally:
            server.stop()
    floor = import_floor(args.reps)
    summary: dict[str, Any] = {
        key: {
            "min": min(r[key] for r in rows),
            "median": round(statistics.median(r[key] for r in rows), 3),
            "max": max(r[key] for r in rows),
        }
        for key in rows[0]
    }
    print(json.dumps({"median_parts": summary, "import_loghubd_app_s": floor}, indent=1))
    result = {"machine": C.machine_notes(), "runs": rows, "summary": summary, "import": floor}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
