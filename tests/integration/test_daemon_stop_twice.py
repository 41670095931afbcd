"""The same stop sent twice, the second copy a few milliseconds after the first, to a daemon
with nothing to finish: its graceful shutdown is over within milliseconds, and the second
copy then meets the process as it exits. It must still exit 0. (Python's finalization sets
every signal with a Python handler back to its default action, which for SIGTERM is to die:
an audit saw exit 143 after `shutdown_complete`, three times out of three, at 10 ms.)"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from loghubd.testing import ServerProcess
from tests.integration.daemon_harness import Pool

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("gap_s", [0.005, 0.01, 0.02, 0.04])
def test_a_second_sigterm_as_the_daemon_exits_leaves_exit_code_0(
    daemon_pool: Pool, gap_s: float
) -> None:
    logstore = f"twice-{int(gap_s * 1000)}"
    daemon_pool.admin.create_logstore(logstore, 1)
    daemon = daemon_pool.daemon(logstore, f"{logstore}-g", "d").wait_ready()
    daemon.signal(signal.SIGTERM)
    time.sleep(gap_s)
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0, daemon.log_tail()
    assert daemon.events("shutdown_complete"), daemon.log_tail()


@pytest.mark.parametrize("gap_s", [0.001, 0.01, 0.2])
def test_serve_takes_a_stop_sent_twice_as_one(tmp_path: Path, gap_s: float) -> None:
    """`loghubd serve` likewise: a second copy while it shuts down (or as it exits) is
    logged, not the default action (it died with 143)."""
    server = ServerProcess(tmp_path / "data").start()
    assert server.proc is not None
    server.proc.send_signal(signal.SIGTERM)
    time.sleep(gap_s)
    if server.proc.poll() is None:
        server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(30) == 0, server.log_path.read_text()[-2000:]
