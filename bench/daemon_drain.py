"""daemon_bench (b): cold-start drain time (see daemon_bench.py)."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from daemon_procs import (
    LS_SMALL,
    Consumer,
    Daemon,
    SdkWorker,
    start_daemon,
    start_sdk,
    wait_done,
    wait_for,
)

# -- (b) cold start drain --------------------------------------------------------------------


def drain_run(
    kind: str, work: Path, port: int, expect: int, tag: str, *, records: bool
) -> dict[str, Any]:
    group, name = f"drain-{kind}-{tag}", f"drain-{kind}-{tag}"
    if kind == "loghubd":
        c: Consumer = start_daemon(
            work, port, LS_SMALL, group, name, heartbeat=2.0, records=records
        )
    else:
        c = start_sdk(work, port, LS_SMALL, group, name, expect, heartbeat=2, records=records)
    try:
        # start-up: the daemon's first /readyz 200 (joined); the SDK's worker thread started
        if isinstance(c, Daemon):
            wait_for("ready", c.ready, 30, interval=0.02)
            t_ready, cpu_ready = time.time(), c.cpu()
        else:
            assert isinstance(c, SdkWorker)
            ev = wait_for(
                "started",
                lambda: next((e for e in c.poll_events() if e["event"] == "started"), None),
                30,
                0.02,
            )
            t_ready, cpu_ready = float(ev["t"]), c.cpu()
        t_done = wait_done(c, expect, 170, poll=0.25)
        cpu = c.cpu()
    finally:
        c.stop(signal.SIGKILL)  # measured; a graceful exit would only cost time
    return {
        "consumer": kind,
        "processor": "records" if records else "count",
        "logs": expect,
        "wall_s": t_done - c.t_spawn,
        "startup_s": t_ready - c.t_spawn,
        "startup_cpu_s": cpu_ready,
        "after_startup_s": t_done - t_ready,
        "cpu_s_incl_startup": cpu,
    }
