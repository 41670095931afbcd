"""A/B of the C record decoder (`loghubd._fastlog`, behind `Batch.logs()`) between a git
revision and the work tree, in one process, interleaved.

Both versions of `_fastlog.c` are compiled with Python's own CFLAGS into temporary
directories and loaded side by side; each repetition decodes views_bench's batch (1,000 groups
of 200 logs, 9 fields) in `Batch.logs()`'s chunks with one, then the other. Prints ns per log
(CPU, min / median / max) and the per-pair ratio base/new. The two must return equal records.

    .venv/bin/python bench/fastlog_ab.py [--base HEAD] [--reps 21] [--groups 1000]
                                         [--vary first|last]
"""

from __future__ import annotations

import argparse
import importlib.util
import shlex
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from types import ModuleType

from views_bench import make_raw

from loghubd.models import CHUNK_LOGS

ROOT = Path(__file__).resolve().parent.parent
SOURCE = "loghubd/_fastlog.c"


def build(source: str, into: Path) -> ModuleType:
    into.mkdir()
    (into / "_fastlog.c").write_text(source)
    so = into / f"_fastlog{sysconfig.get_config_var('EXT_SUFFIX')}"
    cflags = shlex.split(sysconfig.get_config_var("CFLAGS") or "-O3")
    include = sysconfig.get_paths()["include"]
    command = ["gcc", *cflags, "-fPIC", "-shared", f"-I{include}", f"-I{ROOT / 'loghubd'}"]
    subprocess.run([*command, str(into / "_fastlog.c"), "-o", str(so)], check=True)
    spec = importlib.util.spec_from_file_location("_fastlog", so)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ns_per_log(module: ModuleType, raw: bytes) -> float:
    started, offset, count = time.process_time(), 0, 0
    while offset < len(raw):
        records, offset = module.decode_chunk(raw, offset, CHUNK_LOGS)
        count += len(records)
        del records
    return (time.process_time() - started) / count * 1e9


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="HEAD", help="git revision to compare against")
    parser.add_argument("--reps", type=int, default=21)
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument(
        "--vary",
        choices=("", "first", "last"),
        default="",
        help="every other log has another first (or last) key: shapes alternate",
    )
    args = parser.parse_args()
    base_source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{args.base}:{SOURCE}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    raw = make_raw(args.groups, vary=args.vary)
    with tempfile.TemporaryDirectory() as tmp:
        versions = {
            "base": build(base_source, Path(tmp, "base")),
            "new": build((ROOT / SOURCE).read_text(), Path(tmp, "new")),
        }
        if versions["base"].decode(raw) != versions["new"].decode(raw):
            print("the two versions decode differently", file=sys.stderr)
            return 1
        times: dict[str, list[float]] = {name: [] for name in versions}
        for _ in range(args.reps):
            for name, module in versions.items():
                times[name].append(ns_per_log(module, raw))
    print(f"{len(raw) // 1000} kB of wire, ns per log (CPU), min / median / max")
    for name, values in times.items():
        print(f"  {name:5} {min(values):6.0f} {statistics.median(values):6.0f} {max(values):6.0f}")
    ratios = [b / n for b, n in zip(times["base"], times["new"], strict=True)]
    print(
        f"  base/new per pair: {min(ratios):.3f} / {statistics.median(ratios):.3f} / "
        f"{max(ratios):.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
