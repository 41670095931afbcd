"""`shutdown.exiting`: once the work is done, stop signals are ignored (a late copy of a stop
must not end the process with 143) and an exit that hangs ends by itself, with the code the
process was exiting with. In a child process: it ends the interpreter."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

CHILD = """
import signal, sys, threading, time
from loghubd import shutdown
shutdown.EXIT_GRACE_S = {grace}
shutdown.exiting(7)
print("ready", flush=True)
if {hang}:
    threading.Thread(target=time.sleep, args=(60,)).start()  # joined at exit: a hang
time.sleep(0.5)  # the signals come now
sys.exit(7)
"""


def run_child(grace: float, hang: bool) -> tuple[int, str, float]:
    began = time.monotonic()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD.format(grace=grace, hang=hang)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    child.send_signal(signal.SIGTERM)
    child.send_signal(signal.SIGINT)
    out, _ = child.communicate(timeout=30)
    return child.returncode, out, time.monotonic() - began


def test_stop_signals_are_ignored_at_exit() -> None:
    code, out, _took = run_child(grace=30.0, hang=False)
    assert code == 7, out  # not -15 or 130: the signals met the exit and were ignored


def test_an_exit_that_hangs_ends_by_itself_with_its_code() -> None:
    code, out, took = run_child(grace=1.0, hang=True)
    assert code == 7, out
    assert "exit_did_not_finish" in out, out
    assert took < 20, took  # not the 60 s the thread would hold it
