"""daemon_bench (a): logs per CPU-second of the consumer process (see daemon_bench.py)."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from daemon_procs import (
    LS_HO,
    Consumer,
    Gate,
    group_consumers,
    start_daemon,
    start_sdk,
    wait_done,
    wait_for,
)

# -- (a) efficiency --------------------------------------------------------------------------


def efficiency_run(
    kind: str, work: Path, port: int, logstore: str, expect: int, tag: str, scrape_cpu_s: float
) -> dict[str, Any]:
    group = f"eff-{kind}-{tag}"
    gate = Gate(port, logstore, group)
    gate.start()
    name = f"{kind}-{tag}"
    if kind == "loghubd":
        c: Consumer = start_daemon(work, port, logstore, group, name, heartbeat=2.0)
        wait_for("daemon ready", c.ready, 30)
    else:
        c = start_sdk(work, port, logstore, group, name, expect, heartbeat=2)
        wait_for("sdk joined", lambda: name in group_consumers(port, logstore, group), 30)
    try:
        time.sleep(0.5)  # idle, joined, holding nothing: start-up is over
        scrapes0 = getattr(c, "scrapes", 0)
        cpu0, t0 = c.cpu(), time.time()
        gate.open()
        t_done = wait_done(c, expect, 120, poll=0.2)
        cpu1 = c.cpu()
        scrapes = getattr(c, "scrapes", 0) - scrapes0
    finally:
        c.stop(signal.SIGKILL)  # measured; a graceful exit would only cost time
    cpu = cpu1 - cpu0
    # the daemon also answered our /metrics polls; the SDK had no such cost: take it out
    net = cpu - scrapes * scrape_cpu_s
    return {
        "consumer": kind,
        "logstore": logstore,
        "logs": expect,
        "cpu_s": cpu,
        "metrics_scrapes": scrapes,
        "cpu_s_net_of_scrapes": net,
        "wall_s": t_done - t0,
        "logs_per_cpu_s_raw": expect / cpu if cpu else float("nan"),
        "logs_per_cpu_s": expect / net if net > 0 else float("nan"),
    }


def scrape_cost(work: Path, port: int) -> dict[str, float]:
    """CPU the daemon spends answering one /metrics scrape (holding 4 idle shards)."""
    d = start_daemon(work, port, LS_HO, "scrape-cost", "scrape-cost", heartbeat=2.0)
    try:
        wait_for("daemon ready", d.ready, 30)
        wait_done(d, 800, 30)
        time.sleep(1.0)
        n = 100
        idle0 = d.cpu()
        time.sleep(2.0)
        idle = (d.cpu() - idle0) / 2.0
        c0, t0 = d.cpu(), time.perf_counter()
        for _ in range(n):
            d.consumed()
        dt = time.perf_counter() - t0
        per = (d.cpu() - c0 - idle * dt) / n
    finally:
        d.stop()
    return {
        "cpu_ms_per_scrape": per * 1e3,
        "idle_cpu_share": idle,
        "share_at_20_scrapes_per_s": per * 20,
    }
