"""`loghubd spark-archive`: the archive the run's controller made with it (conftest.py,
tests/spark_cds.py) is one a Spark driver JVM maps, checked with `-Xshare:on` (the JVM
refuses to start rather than start without it); a bad place is one line and exit 1."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import spark_cds

pytestmark = [pytest.mark.spark]

SPARK_SUBMIT = Path(__import__("pyspark").__file__).parent / "bin" / "spark-submit"
WAIT_S = 400.0  # made at the run's start: ~50-80 s under the suite's load


def _version(archive: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, SPARK_SUBMIT_OPTS=f"-Xshare:on -XX:SharedArchiveFile={archive}")
    return subprocess.run(
        [str(SPARK_SUBMIT), "--version"], env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.timeout(WAIT_S + 300)
def test_the_runs_archive_is_mapped_by_a_spark_driver(tmp_path: Path) -> None:
    where = os.environ.get(spark_cds.ENV)
    assert where, f"the run set no {spark_cds.ENV}: conftest.py made no archive (no Java?)"
    archive = Path(where)
    deadline = time.monotonic() + WAIT_S
    while not archive.exists() and time.monotonic() < deadline:
        time.sleep(1.0)
    log = spark_cds.log_of(archive)
    assert archive.exists(), (
        f"no archive after {WAIT_S:.0f} s: {log.read_text()[-3000:] if log.exists() else ''}"
    )
    used = _version(archive)
    assert used.returncode == 0, used.stderr[-3000:]
    assert "version" in used.stderr + used.stdout
    # The check can fail: a file that is not an archive stops the JVM under -Xshare:on.
    bogus = tmp_path / "bogus.jsa"
    bogus.write_bytes(b"not an archive" * 100)
    refused = _version(bogus)
    assert refused.returncode != 0
    assert "shared archive" in refused.stdout + refused.stderr


def test_an_archive_that_cannot_be_written_is_one_line_and_exit_1(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    done = subprocess.run(
        [sys.executable, "-m", "loghubd", "spark-archive", str(blocker / "x.jsa")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.startswith(f"loghubd spark-archive: no archive at {blocker / 'x.jsa'}:")
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr
