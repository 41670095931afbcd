"""Cost per log of each Batch view (logs(), jsonl(), arrow(), log_count), C and Python paths.

One process, no server: a batch of 1,000 log groups of 200 logs (9 fields, ~214 B of wire per
log, like daemon_bench's backlog) is built once, and each view is timed over it several
times in CPU time (time.process_time); the minimum and the median are printed, in ns per log.
The Python paths are the ones `LOGHUBD_NO_C=1` selects (the extensions set to None here).

    .venv/bin/python bench/views_bench.py [--groups 1000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from loghubd import arrow, arrow_view, models
from loghubd.files import write_all
from loghubd.models import Batch
from loghubd.protocol import cursor as cursors
from loghubd.protocol import pb


def make_raw(groups: int, per_group: int = 200, vary: str = "") -> bytes:
    """`vary`: "" (every log has the same keys), "first" or "last" (that key of every other
    log is another one: consecutive logs differ in shape)."""
    serialized = []
    for g in range(groups):
        group = pb.LogGroup(Topic="bench", Source=f"10.0.{g % 250}.{g % 7}")
        group.LogTags.add(Key="host", Value=f"web-{g % 16}")
        for i in range(per_group):
            log = group.Logs.add(Time=1_700_000_000 + i)
            for k, v in (
                ("level", "INFO"),
                ("msg", f"request served for user {i * 7919 % 100000}"),
                ("user", f"u{i % 1000}"),
                ("path", f"/api/v1/items/{i}"),
                ("status", "200"),
                ("latency_ms", str(i % 97)),
                ("method", "GET"),
                ("ua", "Mozilla/5.0 (X11; Linux x86_64)"),
                ("id", f"{g:06d}-{i:04d}"),
            ):
                if i % 2 and ((vary == "first" and k == "level") or (vary == "last" and k == "id")):
                    k = f"{k}_2"
                log.Contents.add(Key=k, Value=v)
        serialized.append(group.SerializeToString())
    return pb.frame_log_groups(serialized)


def timed(fn: Callable[[], Any], repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t = time.process_time()
        fn()
        out.append(time.process_time() - t)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    raw = make_raw(args.groups)
    n = 200 * args.groups
    start = cursors.encode(0)
    end = cursors.encode(args.groups)

    def batch() -> Batch:
        return Batch(0, start, end, raw, args.groups)

    # A file on disk (unlinked at once), emptied before each write-out.
    path = os.path.join(tempfile.gettempdir(), f"views-bench-{os.getpid()}.jsonl")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.unlink(path)

    def chunks_to_file() -> int:  # what the `jsonl` processor did before write_jsonl()
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        total = 0
        for chunk in batch().jsonl_chunks():
            write_all(fd, chunk)
            total += len(chunk)
        return total

    def write_jsonl_to_file() -> int:
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        return batch().write_jsonl(fd)

    views: dict[str, Callable[[], Any]] = {
        "log_count": lambda: batch().log_count,
        "logs()": lambda: sum(1 for _ in batch().logs()),
        "jsonl_chunks()": lambda: sum(len(c) for c in batch().jsonl_chunks()),
        "jsonl_chunks() -> file": chunks_to_file,
        "write_jsonl() -> file": write_jsonl_to_file,
        "arrow()": lambda: batch().arrow(),
        "json.dumps per logs() record": lambda: sum(
            len((models.json.dumps(r) + "\n").encode()) for r in batch().logs()
        ),
    }
    print(f"{n:,} logs, {len(raw) / n:.0f} B of wire per log; ns per log (CPU), min / median")
    saved = (models._fastlog, models._fastjsonl, arrow.c_parse, arrow_view.c_fields)
    for path in ("C", "Python"):
        if path == "Python":
            models._fastlog = models._fastjsonl = None
            arrow.c_parse = arrow_view.c_fields = None
        for name, fn in views.items():
            if path == "Python" and name.startswith("json.dumps"):
                continue
            times = timed(fn, args.repeat if path == "C" else max(1, args.repeat // 2))
            lo, med = min(times) / n * 1e9, statistics.median(times) / n * 1e9
            print(f"  {path:6} {name:30} {lo:8.0f} {med:8.0f}")
    models._fastlog, models._fastjsonl, arrow.c_parse, arrow_view.c_fields = saved
    os.close(fd)


if __name__ == "__main__":
    main()
