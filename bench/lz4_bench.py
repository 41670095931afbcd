"""Cost of decoding one LZ4 PullLogs body, C (loghubd._fastlz4) against python-lz4.

One process, no server: a PullLogs answer as wire_bench's backlog gives it (a LogGroupList of
`--groups` log groups of 200 logs, ~214 B per log, 20 distinct groups repeated; 1,000 groups
is what one pull of the daemon asks for) is compressed once as an SLS body, then
compress.decompress() decodes it `--repeat` times on each path, the two paths alternating.
Printed: CPU time (time.process_time: the page faults of the fresh output buffers count) per
log and the raw MB/s, min / median / max.

    .venv/bin/python bench/lz4_bench.py [--groups 1000] [--repeat 15]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C

from loghubd.native import load_extension
from loghubd.protocol import compress, pb


def make_raw(groups: int) -> bytes:
    """A LogGroupList of `groups` log groups of 200 logs (field 1, length-delimited, each)."""
    distinct = [C.make_log_group(200, i, i * 200) for i in range(20)]
    return b"".join(
        b"\x0a" + pb.encode_varint(len(g)) + g for g in (distinct[i % 20] for i in range(groups))
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    if compress.LZ4_DECODER != "c":
        sys.exit("lz4_bench: the C decoder is not in use (LOGHUBD_NO_C set, or not built)")
    extension = load_extension("loghubd._fastlz4")
    assert extension is not None
    paths = {"c": extension.decompress, "python": compress._python_lz4}
    raw = make_raw(args.groups)
    pb.LogGroupList.FromString(raw)  # well formed
    body = compress.compress(compress.LZ4, raw)
    logs = args.groups * 200
    times: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(args.repeat):
        for name, decoder in paths.items():
            compress._lz4_decompress = decoder
            t = time.process_time()
            out = compress.decompress(compress.LZ4, body, len(raw))
            times[name].append(time.process_time() - t)
            assert out == raw
            del out
    print(
        f"{logs:,} logs, {len(raw) / 1e6:.1f} MB raw in {len(body) / 1e6:.1f} MB of LZ4; "
        "CPU ns per log and raw MB/s, min / median / max"
    )
    for name, ts in times.items():
        lo, med, hi = min(ts), statistics.median(ts), max(ts)
        ns = " ".join(f"{t / logs * 1e9:6.1f}" for t in (lo, med, hi))
        mbs = " ".join(f"{len(raw) / t / 1e6:6.0f}" for t in (hi, med, lo))
        print(f"  {name:6} ns/log {ns}   MB/s {mbs}")
    c, py = statistics.median(times["c"]), statistics.median(times["python"])
    print(f"  python / c (medians): {py / c:.2f}")


if __name__ == "__main__":
    main()
