"""Fault injection for crash tests: `LOGHUBD_SPARK_CRASH_AFTER=<stage>` makes the daemon
`os._exit(137)` (as if killed with `kill -9`) right after that stage of a write:

- `wal_written`: the write-ahead entry is recorded (pending), nothing is in the sink yet;
- `sink_written`: Spark committed the output, the entry is still pending;
- `wal_committed`: the entry is committed, the batches are not acked (no checkpoint yet).

`LOGHUBD_SPARK_CRASH_AFTER_COUNT=N` crashes at the N-th time the stage is reached (default 1).
Only normal writes crash; recovery at start-up never does. Never set these in production.
"""

from __future__ import annotations

import os
import sys
import threading

STAGES = ("wal_written", "sink_written", "wal_committed")
ENV, ENV_COUNT = "LOGHUBD_SPARK_CRASH_AFTER", "LOGHUBD_SPARK_CRASH_AFTER_COUNT"

_lock = threading.Lock()
_reached: dict[str, int] = {}


def reached(stage: str) -> None:
    if os.environ.get(ENV) != stage:
        return
    with _lock:
        _reached[stage] = _reached.get(stage, 0) + 1
        count = _reached[stage]
    if count >= int(os.environ.get(ENV_COUNT, "1") or 1):
        sys.stderr.write(f"loghubd-spark: fault injection: crashing after {stage} (#{count})\n")
        sys.stderr.flush()
        os._exit(137)
