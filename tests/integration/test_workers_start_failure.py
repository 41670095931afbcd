"""The `--workers` supervisor tells a worker that could not start from one that crashed after
it ran, by the worker's own READY=1 (sent to the supervisor's notification socket, with or
without systemd): a start-up failure code (2, 3, 4) before READY=1 stops everything with that
code; the same code after READY=1, or exit 1 before it, is restarted as a crash.

The real supervisor (`loghubd.workers.run_workers`, in its own process, no NOTIFY_SOCKET of
its own) runs scripted workers here: a real `loghubd run` cannot be made to exit 4 after it
was ready (only a failed reload whose rollback failed too does). The real `loghubd run`
worker whose port is taken: `test_daemon_workers.py`."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

# The supervisor, as `loghubd run -c ... --workers 2` would run it, but each worker is WORKER.
SUPERVISOR = """
import sys
from loghubd import config, logging, workers

script = sys.argv[1]
workers._child_argv = lambda argv, name: [sys.executable, script, name]
logging.configure("info", "json")
cfg = config.load(None, {}, {
    "source.endpoint": "http://127.0.0.1:9", "source.project": "proj", "source.logstore": "logs",
    "consumer.group": "grp", "consumer.name": "w", "ops.listen": "127.0.0.1:0",
})
sys.exit(workers.run_workers(2, [], cfg))
"""

# One worker process: what it does depends on its name and on how many times it was started
# (`<state>/<name>.runs`), as PLANS says. `ready` sends READY=1 to $NOTIFY_SOCKET, as
# `loghubd run` does once it listens and has joined its group.
WORKER = """
import os, signal, socket, sys, time
from pathlib import Path

state = Path(__file__).parent
name = sys.argv[1]
stop = state / f"{name}.stopped"
signal.signal(signal.SIGTERM, lambda *_: (stop.write_text("SIGTERM"), sys.exit(0)))
runs_file = state / f"{name}.runs"
runs = int(runs_file.read_text()) + 1 if runs_file.exists() else 1
runs_file.write_text(str(runs))
PLANS = {
    # exit 1 before ready: restarted; ready, then 4: restarted; 4 before ready: give up
    # (once w-1 runs again, so the stop it gets is seen).
    "w-0": ["exit 1", "ready; exit 4", "wait w-1.ready; exit 4"],
    # ready, then 2 (a reload and its rollback that could not start): restarted; then runs
    # until the supervisor stops it.
    "w-1": ["ready; exit 2", "ready; touch w-1.ready; run"],
}
for step in PLANS[name][runs - 1].split("; "):
    word, _, arg = step.partition(" ")
    if word == "ready" and "NOTIFY_SOCKET" in os.environ:  # as sd_notify: none, no message
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.connect(os.environ["NOTIFY_SOCKET"])
            sock.send(b"READY=1")
    elif word == "touch":
        (state / arg).touch()
    elif word == "wait":
        while not (state / arg).exists():
            time.sleep(0.05)
    elif word == "exit":
        sys.exit(int(arg))
    elif word == "run":
        while True:
            time.sleep(1)
"""


def test_start_failure_before_ready_stops_all_but_after_ready_is_restarted(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    worker = state / "worker.py"
    worker.write_text(textwrap.dedent(WORKER))
    log_path = tmp_path / "supervisor.log"
    with open(log_path, "wb") as log:  # a file: a worker left behind would hold a pipe open
        supervisor = subprocess.Popen(
            [sys.executable, "-c", SUPERVISOR, str(worker)], stdout=log, stderr=subprocess.STDOUT
        )
    try:
        # w-0: 1 s back-off after its first death, 5 s after its second (within 30 s)
        code = supervisor.wait(timeout=14)
    except subprocess.TimeoutExpired:
        code = None
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
            supervisor.wait(10)
        subprocess.run(["pkill", "-9", "-f", "--", str(worker)], check=False)
    out = log_path.read_text()
    assert code == 4, out
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    deaths = [(e["name"], e["exit_code"]) for e in events if e["event"] == "worker_died"]
    assert sorted(deaths) == [("w-0", 1), ("w-0", 4), ("w-1", 2)], out
    restarted = sorted(e["name"] for e in events if e["event"] == "worker_restarted")
    assert restarted == ["w-0", "w-0", "w-1"], out
    failed = [e for e in events if e["event"] == "worker_cannot_start"]
    assert [(e["name"], e["exit_code"]) for e in failed] == [("w-0", 4)], out
    assert "w-0 exited 4 before it was ready" in failed[0]["reason"]
    # w-1 was stopped with SIGTERM, exited 0, and is not restarted; w-0 not a fourth time
    assert (state / "w-1.stopped").read_text() == "SIGTERM"
    assert not [e for e in events if e["event"] == "worker_stopped"], out
    assert ((state / "w-0.runs").read_text(), (state / "w-1.runs").read_text()) == ("3", "2")
