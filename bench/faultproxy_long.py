"""The long fault-proxy run (acceptance 2 of RELIABILITY.md): tests/reliability/proxyrun.py
with big numbers. Daemons behind the fault proxy: 2 minutes of delay up to 2 s with 5 %
dropped connections and 2 % responses reset mid-way (no shard may change hands), then a 30 s
black-hole (each daemon under 5 % of a core meanwhile), recovery within one heartbeat,
0 logs missing.

    .venv/bin/python bench/faultproxy_long.py [--blackhole S] [--faults S] [--json FILE]

Takes about 4 minutes. Exit 1 if a check failed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.reliability.proxyrun import ProxyRun, ProxyRunConfig, problems


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--daemons", type=int, default=3)
    p.add_argument("--shards", type=int, default=8)
    p.add_argument("--rate", type=float, default=2_000.0)
    p.add_argument("--faults", type=float, default=120.0, help="seconds of delay/drop/reset")
    p.add_argument("--blackhole", type=float, default=30.0, help="seconds of black-hole")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument(
        "--json", type=Path, default=Path(__file__).parent / "results/faultproxy_long.json"
    )
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="faultproxy-long-") as tmp:
        cfg = ProxyRunConfig(
            Path(tmp),
            daemons=args.daemons,
            shards=args.shards,
            rate=args.rate,
            fault_seconds=args.faults,
            delay=2.0,
            drop=0.05,
            reset=0.02,
            blackhole_seconds=args.blackhole,
            tail_seconds=10.0,
            seed=args.seed,
        )
        report = ProxyRun(cfg, progress=lambda t: print(t, flush=True)).run()
    found = problems(report, cfg)
    report["problems"] = found
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=1, default=str) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "config"}, indent=1, default=str))
    print("\n".join(found) if found else "OK")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
