"""The same stop sent twice, the second copy a few milliseconds after the first, to a daemon
with nothing to finish: its graceful shutdown is over within milliseconds, and the second
copy then meets the process as it exits. It must still exit 0. (Python's finalization sets
every signal with a Python handler back to its default action, which for SIGTERM is to die:
an audit saw exit 143 after `shutdown_complete`, three times out of three, at 10 ms.)"""

from __future__ import annotations

import signal
import time

import pytest

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
