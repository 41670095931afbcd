"""A processor whose `start()` fails (after the daemon joined its group): one line naming
the processor, the exit code of the commands' table, and no traceback unless asked for.

Found by the Spark user audit: a pipeline that raised, a SQL syntax error or an impossible
path each ended `run` with exit 1, a Python repr (`SparkError('ValueError: ...')`) and a full
exception-group traceback in the JSON log.
"""

from __future__ import annotations

import pytest

from loghubd.testing.process import ServerProcess
from tests.integration.daemon_harness import Pool

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("fails", "code", "line"),
    [
        ("value", 2, "processor.record.start_fails: refused, as asked"),
        ("sink", 4, "processor.record: the sink at sink.test:9 refused the connection"),
        ("bug", 1, "processor.record: start() failed: RuntimeError: a bug in start()"),
    ],
)
def test_a_processor_that_cannot_start_says_so_in_one_line(
    loghubd_server: ServerProcess, daemon_pool: Pool, fails: str, code: int, line: str
) -> None:
    pool = daemon_pool
    logstore = f"refused-{fails}"
    pool.admin.create_logstore(logstore, 1)
    daemon = pool.daemon(
        logstore,
        "grp",
        f"d-{fails}",
        processor="record",
        processor_options={"path": str(pool.dir / "out.jsonl"), "start_fails": fails},
    )
    assert daemon.wait(60) == code, daemon.log_tail()
    text = daemon.log_path.read_text()
    assert f"loghubd run: cannot start: {line}\n" in text, text
    assert "Traceback" not in text, text
    (event,) = daemon.events("source_cannot_start")
    assert event["error"] == line and "exception" not in event, event


def test_under_debug_logging_the_start_failure_carries_its_traceback(
    loghubd_server: ServerProcess, daemon_pool: Pool
) -> None:
    pool = daemon_pool
    pool.admin.create_logstore("refused-debug", 1)
    daemon = pool.daemon(
        "refused-debug",
        "grp",
        "d-debug",
        processor="record",
        processor_options={"path": str(pool.dir / "out.jsonl"), "start_fails": "bug"},
        start=False,
    )
    daemon.config["log"]["level"] = "debug"
    daemon.start()
    assert daemon.wait(60) == 1, daemon.log_tail()
    (event,) = daemon.events("source_cannot_start")
    assert "harness_processors.py" in event["exception"], event
    assert "RuntimeError: a bug in start()" in event["exception"], event
