"""daemon_bench (c): hand-over and fail-over between two daemons (see daemon_bench.py)."""

from __future__ import annotations

import random
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from daemon_procs import LS_HO, Daemon, start_daemon, wait_for

# -- (c) hand-over and fail-over -------------------------------------------------------------


def holds_all(d: Daemon, shards: int) -> bool:
    st = d.status()
    if not st or len(st["held"]) != shards:
        return False
    return sum(1 for s in st["shards"] if s["state"] in ("consuming", "finished")) == shards


def holds(d: Daemon) -> int:
    st = d.status()
    return 0 if not st else sum(1 for s in st["shards"] if s["state"] == "consuming")


def handover_trials(work: Path, port: int, trials: int) -> dict[str, Any]:
    group, shards = "ho-group", 8
    b = start_daemon(work, port, LS_HO, group, "ho-b", heartbeat=1.0, timeout=4.0)
    out: dict[str, list[dict[str, float]]] = {"graceful": [], "crash": []}
    try:
        wait_for("b holds all", lambda: holds_all(b, shards), 30)
        for i in range(trials):
            for mode, sig in (("graceful", signal.SIGTERM), ("crash", signal.SIGKILL)):
                a = start_daemon(
                    work, port, LS_HO, group, f"ho-a{i}-{mode}", heartbeat=1.0, timeout=4.0
                )
                try:
                    wait_for(
                        "balanced",
                        lambda a=a: holds(a) == 4 and holds(b) == 4 and holds_all_count(b) == 4,
                        40,
                    )
                    # steady for a while, then signal at a random phase of the heartbeats
                    time.sleep(1.5 + random.random())
                    t0 = time.perf_counter()
                    a.proc.send_signal(sig)
                    t_held = t_all = t_exit = None
                    deadline = t0 + 30
                    while time.perf_counter() < deadline:
                        st = b.status()
                        now = time.perf_counter()
                        if t_exit is None and a.proc.poll() is not None:
                            t_exit = now - t0
                        if st and t_held is None and len(st["held"]) == shards:
                            t_held = now - t0
                        if (
                            st
                            and sum(1 for s in st["shards"] if s["state"] == "consuming") == shards
                        ):
                            t_all = now - t0
                            break
                        time.sleep(0.02)
                    rc = a.proc.wait(30)
                    if t_exit is None:
                        t_exit = time.perf_counter() - t0
                finally:
                    a.stop(signal.SIGKILL)
                if t_all is None:
                    raise TimeoutError(f"{mode}: b never held all shards")
                out[mode].append(
                    {
                        "held_s": t_held or t_all,
                        "consuming_s": t_all,
                        "other_exit_s": t_exit,
                        "exit_code": rc,
                    }
                )
                print(
                    f"  {mode} {i + 1}/{trials}: all {shards} shards consuming on the other "
                    f"daemon after {t_all:.2f} s (the stopped one exited after "
                    f"{t_exit:.2f} s, code {rc})",
                    flush=True,
                )
    finally:
        b.stop()
    summary: dict[str, Any] = {}
    for mode, rows in out.items():
        xs = [r["consuming_s"] for r in rows]
        summary[mode] = {
            "median_s": statistics.median(xs),
            "max_s": max(xs),
            "min_s": min(xs),
            "trials": rows,
        }
    return summary


def holds_all_count(d: Daemon) -> int:
    st = d.status()
    return 0 if not st else len(st["held"])
