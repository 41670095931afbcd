"""Where the daemon's CPU goes per log: an in-process reproduction of one batch's work.

    .venv/bin/python bench/profile_batch.py [--groups 1000] [--logs-per-group 10] [--profile]

Builds one PullLogs answer (a LogGroupList of `--groups` LogGroups of realistic ~210-byte
logs, lz4-compressed as the server sends it) and times, on one core, each step loghubd does
with it for the `null` processor, against the SDK doing the same with its own classes:

- lz4 decompression of the answer (loghubd.protocol.compress)
- LogGroupList parse alone (upb)
- `Batch.log_group_list` (parse + the loop that reads every value to force UTF-8 checks)
- `Batch.logs()` fully iterated (the C decoder `loghubd._fastlog` when it is built; run with
  LOGHUBD_NO_C=1 for the pure Python path), and NullProcessor.process + `Batch.log_count`
  (what a shard task does per batch with the `null` processor), counting and with
  `records = true`
- the SDK: LogGroupList.ParseFromString + PullLogResponse.loggroups_to_flattern_list

`--profile` adds a cProfile listing of NullProcessor.process over the batch.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C

from loghubd import models
from loghubd.models import Batch
from loghubd.plugins.builtin import NullProcessor
from loghubd.protocol import compress as codec
from loghubd.protocol import pb


class _Tracker:
    def save_checkpoint(self, persist: bool = True) -> None:
        pass


def best_of(fn: Any, reps: int) -> float:
    """Minimum wall time of `reps` calls (the least disturbed one, on a noisy machine)."""
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--groups", type=int, default=1000)
    p.add_argument("--logs-per-group", type=int, default=10)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--profile", action="store_true")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    C.pin_self(C.SERVER_CORE)

    groups = [C.make_log_group(args.logs_per_group, 100 + i) for i in range(args.groups)]
    raw = pb.frame_log_groups(groups)
    wire = codec.compress(codec.LZ4, raw)
    n_logs = args.groups * args.logs_per_group
    print(
        f"one answer: {args.groups} groups x {args.logs_per_group} logs = {n_logs:,} logs, "
        f"{len(raw) / 1e6:.2f} MB raw, {len(wire) / 1e6:.2f} MB lz4"
    )

    def fresh() -> Batch:
        return Batch(0, "c", "n", raw, args.groups, len(raw))

    def iterate_logs() -> None:
        for _ in fresh().logs():
            pass

    def touch_only() -> None:
        fresh().log_group_list  # noqa: B018

    from aliyun.log.proto import LogGroupList as SdkLogGroupList
    from aliyun.log.pulllog_response import PullLogResponse

    def sdk_flatten() -> None:
        lgl = SdkLogGroupList()
        lgl.ParseFromString(raw)
        PullLogResponse.loggroups_to_flattern_list(lgl)

    def sdk_parse() -> None:
        lgl = SdkLogGroupList()
        lgl.ParseFromString(raw)

    def null_process(records: bool) -> Any:
        def run() -> None:
            b = fresh()
            NullProcessor(records).process(b, _Tracker())  # type: ignore[arg-type]
            b.log_count  # noqa: B018  (the shard task counts the logs afterwards)

        return run

    steps = [
        ("lz4 decompress", lambda: codec.decompress(codec.LZ4, wire, len(raw))),
        ("parse only (pb.LogGroupList.FromString)", lambda: pb.LogGroupList.FromString(raw)),
        ("Batch.log_group_list (parse + UTF-8 check loop)", touch_only),
        ("Batch.logs() iterated", iterate_logs),
        ("NullProcessor.process + Batch.log_count", null_process(False)),
        ("the same, records = true", null_process(True)),
        ("SDK parse only", sdk_parse),
        ("SDK parse + loggroups_to_flattern_list", sdk_flatten),
    ]
    results = {}
    for name, fn in steps:
        fn()  # warm
        t = best_of(fn, args.reps)
        results[name] = t
        print(
            f"{name:50}: {t * 1e3:8.1f} ms  {t / n_logs * 1e6:6.2f} µs/log  "
            f"{n_logs / t:12,.0f} logs/s"
        )
    parse = results["parse only (pb.LogGroupList.FromString)"]
    logs = results["Batch.logs() iterated"]
    print(
        f"\nBatch.logs() ({'C decoder' if models._fastlog else 'pure Python'}) costs "
        f"{logs / parse:.1f}x a bare upb parse; SDK parse + flatten / Batch.logs() = "
        f"{results['SDK parse + loggroups_to_flattern_list'] / logs:.2f}"
    )
    for name, t in results.items():
        results[name] = t / n_logs * 1e6
    return_json = {"logs": n_logs, "us_per_log": results}
    if args.json:
        args.json.write_text(__import__("json").dumps(return_json, indent=1))

    if args.profile:
        b = fresh()
        prof = cProfile.Profile()
        prof.enable()
        NullProcessor(records=True).process(b, _Tracker())  # type: ignore[arg-type]
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(12)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
