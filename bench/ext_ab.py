"""A/B of a C extension between a git revision and the work tree, in one process, interleaved.

Both versions of the module's source and of `_wire.h` are compiled with Python's own CFLAGS
into temporary directories and loaded side by side; each repetition runs the module's hot
call over views_bench's batch (1,000 groups of 200 logs, 9 fields) with one, then the other:

- `_fastlog`: `decode_chunk` in `Batch.logs()`'s chunks (the records of `Batch.logs()`);
- `_fastarrow`: `fields` over the whole batch (`batch.arrow()`'s pivot, into one Arrow
  buffer, with jemalloc as in the daemon);
- `_fastjsonl`: `write_chunk` to /dev/null over the batch in the `jsonl` processor's chunk
  size (`batch.write_jsonl()`'s lines, without the kernel's copy into a file).

Prints ns per log (CPU, min / median / max) and the per-pair ratio base/new. The two must
give equal results.

    .venv/bin/python bench/ext_ab.py [--module _fastlog] [--base HEAD] [--reps 21]
                                     [--groups 1000] [--vary first|last]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shlex
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import _common  # noqa: F401  (chooses Arrow's allocator as the daemon does, before pyarrow)
import pyarrow as pa
from views_bench import make_raw

from loghubd.models import CHUNK_BYTES as JSONL_CHUNK_BYTES
from loghubd.models import CHUNK_LOGS

ROOT = Path(__file__).resolve().parent.parent
WIRE = "loghubd/_wire.h"


def build(name: str, source: str, wire: str, into: Path) -> ModuleType:
    """`wire`: the `_wire.h` it includes (found beside the source before loghubd/'s)."""
    into.mkdir()
    (into / f"{name}.c").write_text(source)
    (into / "_wire.h").write_text(wire)
    so = into / f"{name}{sysconfig.get_config_var('EXT_SUFFIX')}"
    cflags = shlex.split(sysconfig.get_config_var("CFLAGS") or "-O3")
    include = sysconfig.get_paths()["include"]
    command = ["gcc", *cflags, "-fPIC", "-shared", f"-I{include}", f"-I{ROOT / 'loghubd'}"]
    subprocess.run([*command, str(into / f"{name}.c"), "-o", str(so)], check=True)
    spec = importlib.util.spec_from_file_location(name, so)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def records(module: ModuleType, raw: bytes) -> tuple[int, Any]:
    """`_fastlog`: the number of logs, and what decode_chunk made of the last chunk."""
    offset, count, last = 0, 0, None
    while offset < len(raw):
        last, offset = module.decode_chunk(raw, offset, CHUNK_LOGS)
        count += len(last)
    return count, last


def columns(module: ModuleType, raw: bytes) -> tuple[int, Any]:
    """`_fastarrow`: the number of logs, and the pivot's names, nulls and bytes."""
    out = module.fields(raw, None, pa.allocate_buffer)
    assert out is not None, "the C pivot declined the batch"
    rows, names, nulls, data, _sections = out
    return sum(rows), (names, nulls, data)  # a pa.Buffer compares by value


def lines(module: ModuleType, raw: bytes) -> tuple[int, Any]:
    """`_fastjsonl`: the number of logs, and the JSON lines in chunks. Timed as the `jsonl`
    processor calls it (`write_chunk`, from the extension's own buffer), to /dev/null so that
    the kernel's copy into a file is left out; the lines compared are `encode_chunk`'s."""
    offset, count, chunks = 0, 0, []
    while offset < len(raw):
        chunk, offset, logs = module.encode_chunk(raw, offset, JSONL_CHUNK_BYTES)
        chunks.append(chunk)
        count += logs
    return count, chunks


def lines_timed(module: ModuleType, raw: bytes) -> tuple[int, Any]:
    offset, count, size = 0, 0, 0
    with open(os.devnull, "wb") as sink:
        while offset < len(raw):
            written, offset, logs = module.write_chunk(
                raw, offset, JSONL_CHUNK_BYTES, sink.fileno()
            )
            size += written
            count += logs
    return count, size


CALLS: dict[str, Callable[[ModuleType, bytes], tuple[int, Any]]] = {
    "_fastlog": records,
    "_fastarrow": columns,
    "_fastjsonl": lines_timed,
}
# What the two versions' results are compared with, where it is not the timed call.
COMPARED: dict[str, Callable[[ModuleType, bytes], tuple[int, Any]]] = {"_fastjsonl": lines}


def ns_per_log(
    call: Callable[[ModuleType, bytes], tuple[int, Any]], module: ModuleType, raw: bytes
) -> float:
    started = time.process_time()
    count, _ = call(module, raw)
    return (time.process_time() - started) / count * 1e9


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--module", choices=sorted(CALLS), default="_fastlog")
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
    name, call = args.module, CALLS[args.module]
    source = f"loghubd/{name}.c"

    def at_base(path: str) -> str:
        return subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{args.base}:{path}"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout

    base_source, base_wire = at_base(source), at_base(WIRE)
    raw = make_raw(args.groups, vary=args.vary)
    with tempfile.TemporaryDirectory() as tmp:
        versions = {
            "base": build(name, base_source, base_wire, Path(tmp, "base")),
            "new": build(
                name, (ROOT / source).read_text(), (ROOT / WIRE).read_text(), Path(tmp, "new")
            ),
        }
        same = COMPARED.get(name, call)
        if same(versions["base"], raw) != same(versions["new"], raw):
            print("the two versions decode differently", file=sys.stderr)
            return 1
        times: dict[str, list[float]] = {version: [] for version in versions}
        for _ in range(args.reps):
            for version, module in versions.items():
                times[version].append(ns_per_log(call, module, raw))
    print(f"{len(raw) // 1000} kB of wire, ns per log (CPU), min / median / max")
    for version, values in times.items():
        print(
            f"  {version:5} {min(values):6.0f} {statistics.median(values):6.0f} {max(values):6.0f}"
        )
    ratios = [b / n for b, n in zip(times["base"], times["new"], strict=True)]
    print(
        f"  base/new per pair: {min(ratios):.3f} / {statistics.median(ratios):.3f} / "
        f"{max(ratios):.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
