"""Logging from a signal handler (`loghubd.logging.from_signal_handler`, used by
`loghubd.shutdown`): a handler that interrupts the main thread inside a log call must not wait
for structlog's write lock, which that call holds (the process used to hang there, silently).

A real process logs in a tight loop, so that the signal almost always lands inside a write,
and is sent SIGTERM, whose handler is `shutdown._on_second_signal` (what a second SIGTERM
runs): it must exit 1 at once, with its line on stdout."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

SCRIPT = """
import os, signal, sys, threading
from loghubd import logging as loghubd_logging, shutdown
import structlog

loghubd_logging.configure("info", "json", sys.stdout)
signal.signal(signal.SIGTERM, shutdown._on_second_signal)
log = structlog.get_logger("busy")
threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM)).start()
while True:
    log.info("busy", padding="x" * 200)
"""


@pytest.mark.parametrize("attempt", range(3))
def test_a_signal_handler_that_logs_never_waits_for_the_log_lock(attempt: int) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, timeout=30, check=False
    )
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])
    events = []
    for line in done.stdout.splitlines():
        try:
            events.append(json.loads(line)["event"])
        except ValueError:
            continue  # the line the signal cut into (it went out after ours)
    assert "second_signal_exiting_now" in events, done.stdout[-1000:]


REPEATED = """
import os, signal, sys, time
from loghubd import logging as loghubd_logging, shutdown

loghubd_logging.configure("info", "json", sys.stdout)
signal.signal(signal.SIGTERM, shutdown._on_second_signal)
shutdown._stop_began()
os.kill(os.getpid(), signal.SIGTERM)  # the same stop again (systemd's and a supervisor's)
time.sleep(shutdown.SAME_STOP_S + 0.2)
print("still running", flush=True)
os.kill(os.getpid(), signal.SIGTERM)  # an operator's second signal
time.sleep(10)
"""


def test_the_same_stop_twice_is_one_and_a_later_one_ends_the_process() -> None:
    done = subprocess.run(
        [sys.executable, "-c", REPEATED], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])
    lines = [line for line in done.stdout.splitlines() if line]
    events = [json.loads(line)["event"] if line.startswith("{") else line for line in lines]
    assert events == ["stop_signal_repeated", "still running", "second_signal_exiting_now"], (
        done.stdout
    )
