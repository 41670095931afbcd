"""The long chaos run (acceptance 1 of RELIABILITY.md): tests/reliability/chaos.py with big
numbers. 1,000,000 logs, 4 daemons, 16 shards, 20 `kill -9`, 20 SIGTERM, 5 server
`kill -9`/restarts, 2 splits, 1 merge (plus SIGSTOP/SIGCONT of daemons), then the delivery
report: 0 missing, duplicates only inside the killed daemons' un-committed intervals.

    .venv/bin/python bench/chaos_long.py [--logs N] [--rate R] [--seed S] [--json FILE]
        [--keep DIR]

Takes about 6-8 minutes on the shared 2-core machine. Exit 1 if the promise was broken.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.reliability.chaos import ChaosConfig, ChaosRun, problems, summary


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--logs", type=int, default=1_000_000)
    p.add_argument("--rate", type=float, default=4_000.0, help="logs/s written")
    p.add_argument("--daemons", type=int, default=4)
    p.add_argument("--shards", type=int, default=16)
    p.add_argument("--kill9", type=int, default=20)
    p.add_argument("--sigterm", type=int, default=20)
    p.add_argument("--server-restarts", type=int, default=5)
    p.add_argument("--splits", type=int, default=2)
    p.add_argument("--merges", type=int, default=1)
    p.add_argument("--stop-long", type=int, default=3)
    p.add_argument("--stop-short", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", type=Path, default=Path(__file__).parent / "results/chaos_long.json")
    p.add_argument("--keep", type=Path, help="run in this directory and keep it")
    args = p.parse_args()

    with tempfile.TemporaryDirectory(prefix="chaos-long-") as tmp:
        workdir = args.keep or Path(tmp)
        cfg = ChaosConfig(
            workdir,
            daemons=args.daemons,
            shards=args.shards,
            logs=args.logs,
            rate=args.rate,
            chunk=50_000,
            kill9=args.kill9,
            sigterm=args.sigterm,
            stop_long=args.stop_long,
            stop_short=args.stop_short,
            server_restarts=args.server_restarts,
            splits=args.splits,
            merges=args.merges,
            seed=args.seed,
            drain_timeout=600.0,
            progress=lambda text: print(text, flush=True),
        )
        started = time.time()
        report = ChaosRun(cfg).run()
    report["started_unix"] = round(started)
    found = problems(report)
    report["problems"] = found
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=1, default=str) + "\n")
    print(summary(report))
    print("\n".join(found) if found else "OK: the delivery promise held")
    print(f"report: {args.json}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
