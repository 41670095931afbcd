"""The long fuzz run (acceptance 3 of RELIABILITY.md): tests/reliability/test_fuzz.py with
LOGHUBD_FUZZ_EXAMPLES set to 100,000+ (the same code as the CI run, a bigger number), every
family's figures collected through LOGHUBD_FUZZ_STATS.

    .venv/bin/python bench/fuzz_long.py [--examples N] [--json FILE]

Takes about 10 minutes. Exit code: pytest's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--examples", type=int, default=105_000)
    p.add_argument("--json", type=Path, default=ROOT / "bench/results/fuzz_long.json")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="fuzz-long-") as tmp:
        stats = Path(tmp) / "stats.jsonl"
        env = {
            **os.environ,
            "LOGHUBD_FUZZ_EXAMPLES": str(args.examples),
            "LOGHUBD_FUZZ_STATS": str(stats),
        }
        started = time.monotonic()
        cmd = [sys.executable, "-m", "pytest", "-q", "-s", "tests/reliability/test_fuzz.py"]
        code = subprocess.call(cmd, cwd=ROOT, env=env)
        seconds = time.monotonic() - started
        rows = (
            [json.loads(line) for line in stats.read_text().splitlines()] if stats.exists() else []
        )
    by_status: Counter[str] = Counter()
    by_api: Counter[str] = Counter()
    if rows:
        for key, n in rows[-1]["by_api_status"].items():
            api, status = key.rsplit(" ", 1)
            by_status[status] += n
            by_api[api] += n
    report = {
        "examples_setting": args.examples,
        "pytest_exit_code": code,
        "seconds": round(seconds, 1),
        "requests": rows[-1]["requests"] if rows else 0,
        "refused_as_required": rows[-1].get("refused_as_required") if rows else 0,
        "families": [{k: v for k, v in row.items() if k != "by_api_status"} for row in rows],
        "by_status": dict(sorted(by_status.items())),
        "status_5xx": sum(n for s, n in by_status.items() if s.startswith("5")),
        "unanswered_invalid_http": by_status.get("0", 0),
        "by_api": dict(sorted(by_api.items())),
        "by_api_status": rows[-1]["by_api_status"] if rows else {},
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: report[k] for k in ("requests", "seconds", "by_status", "status_5xx")}))
    print(f"report: {args.json}")
    return code


if __name__ == "__main__":
    sys.exit(main())
