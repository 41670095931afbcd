"""`loghubd spark-stream` as a process: when the query fails, one line naming the cause, no
Java or Python traceback, and the documented exit code; on a signal, a clean stop.

Its own scheduling group (conftest.py at the repository root): each case starts a JVM of its
own in a subprocess and shares nothing with the `spark` group's SparkSession, so it runs
beside that group rather than lengthening it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest
from loghubd_spark.query_start import RESTARTING
from spark_harness import lake_ids, late_python, produce, spark_stream, wait_until

from loghubd.testing import ServerProcess

pytestmark = [pytest.mark.spark, pytest.mark.slow]

# The driver JVM every case starts: small, quick to start, no UI.
DRIVER_CONF = (
    '[spark_stream.conf]\n"spark.ui.enabled" = false\n"spark.driver.memory" = "768m"\n'
    '"spark.driver.extraJavaOptions" = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"\n'
)


def spawn(
    config: Path, work: Path, env: Mapping[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], Path]:
    """`loghubd spark-stream -c config` in the background; its stderr goes to work/stderr."""
    stderr = work / "stderr"
    with stderr.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "loghubd", "spark-stream", "-c", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=err,
            cwd=work,
            env=None if env is None else dict(env),
        )
    return proc, stderr


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("logstore", "pipeline", "code", "says"),
    [
        (
            "nosuch",
            'sql = "SELECT * FROM {logs}"',
            1,
            "spark-stream: the query failed: LogStoreNotExist: logstore nosuch does not exist",
        ),
        (
            "app",
            'sql = "SELECT nosuchcol FROM {logs}"',
            2,
            "spark-stream: invalid configuration: spark_stream.sql: [UNRESOLVED_COLUMN",
        ),
        (
            "app",
            'function = "spark_pipelines:raises"',
            2,
            "spark-stream: invalid configuration: spark_stream.function: ValueError: boom from "
            "user code",
        ),
        (
            "app",
            'function = "spark_pipelines:not_a_dataframe_once_there_are_rows"',
            1,
            "spark-stream: the query failed: spark_stream.function must return a DataFrame",
        ),
    ],
    ids=[
        "missing-logstore",
        "bad-column",
        "function-raises",
        "function-fails-in-a-batch",
    ],
)
def test_loghubd_spark_stream_says_why_a_query_failed_in_one_line(
    loghubd_server: ServerProcess,
    tmp_path: Path,
    logstore: str,
    pipeline: str,
    code: int,
    says: str,
) -> None:
    """A failed query is the user's problem, not loghubd's: one line naming the cause, no
    Java or Python traceback, no Spark start-up lines, exit 1 (the query failed) or 2 (the
    pipeline fails over an empty batch, `sql` or `function`: found before the query
    starts)."""
    server = loghubd_server
    produce(server.endpoint, "streamerr", "app", 200, shards=1)
    config = tmp_path / "stream.toml"
    config.write_text(
        f'[source]\nendpoint = "{server.endpoint}"\nproject = "streamerr"\n'
        f'logstore = "{logstore}"\n'
        "[spark_stream]\n"
        f'path = "{tmp_path / "lake"}"\ncheckpoint_location = "{tmp_path / "chk"}"\n'
        f'{pipeline}\nmaster = "local[1]"\navailable_now = true\n'
        f"{DRIVER_CONF}"
    )
    here = str(Path(__file__).resolve().parent)  # spark_pipelines
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([here, os.environ.get("PYTHONPATH", "")])}
    done = spark_stream(config, env, tmp_path)
    output = done.stdout + done.stderr
    assert done.returncode == code, output[-3000:]
    for noise in ("Traceback", "\tat ", "Caused by", "unexpected error", "please report"):
        assert noise not in output, output[-3000:]
    failures = [line for line in said(done.stderr) if "started, writing to" not in line]
    assert len(failures) == 1, output[-3000:]
    assert failures[0].startswith(says), failures[0]
    assert not spark_lines(done.stderr), output[-3000:]
    assert done.stderr.rstrip().endswith(failures[0])  # the last word is the cause


def said(stderr: str) -> list[str]:
    """The command's own lines but a restart's (`query_start`: on a busy host, Spark's Python
    source process may not connect back in time, and the query is started again)."""
    return [
        line for line in stderr.splitlines() if "spark-stream: " in line and RESTARTING not in line
    ]


def spark_lines(stderr: str) -> list[str]:
    """What is not the command's own: nothing of Spark's start-up should be there (its default
    log4j profile's notice and level, the loopback and native-hadoop warnings), only the JVM's
    own line about the vector module."""
    return [
        line
        for line in stderr.splitlines()
        if line.strip()
        and "spark-stream: " not in line
        and not line.startswith("WARNING: Using incubator modules")
    ]


@pytest.mark.timeout(300)
def test_loghubd_spark_stream_stops_cleanly_on_a_signal_mid_stream(
    loghubd_server: ServerProcess, tmp_path: Path
) -> None:
    """A signal while micro-batches follow each other (a backlog read one log group at a time): the
    query stops between micro-batches (the next one held at its start) and the command exits 0,
    with its own three lines only. `query.stop()` during a batch's write printed a thousand
    lines of `Exception in thread ... java.lang.StackOverflowError` (Spark's regex over py4j's
    error text). SIGHUP's default action ended the driver at once, mid-batch. SIGHUP here:
    SIGTERM and SIGINT share its handler (stream_app.run), and it alone had a default action
    that killed. A restart with --available-now then reads the rest: every log exactly once,
    though its source process connects back too late the first time (`late_python`): the command
    starts the query again, saying so in one line."""
    server, total, signum = loghubd_server, 3000, signal.SIGHUP
    project = f"streamstop{signum.name.lower()}"
    produce(server.endpoint, project, "app", total, shards=1, group_size=10)
    lake, config = tmp_path / "lake", tmp_path / "stream.toml"
    config.write_text(
        f'[source]\nendpoint = "{server.endpoint}"\nproject = "{project}"\nlogstore = "app"\n'
        '[consumer]\ngroup = "stop"\n'
        "[spark_stream]\n"
        f'path = "{lake}"\ncheckpoint_location = "{tmp_path / "chk"}"\n'
        "sql = \"SELECT *, CAST(contents['id'] AS BIGINT) AS id FROM {logs}\"\n"
        'master = "local[1]"\ntrigger_interval = 0\nmax_log_groups_per_trigger = 1\n'
        f'{DRIVER_CONF}"spark.sql.shuffle.partitions" = 1\n'
    )
    proc, stderr = spawn(config, tmp_path)
    try:
        commits = tmp_path / "chk" / "commits"
        wait_until(
            lambda: commits.is_dir() and len(list(commits.glob("[0-9]*"))) >= 1,
            180,
            lambda: stderr.read_text()[-3000:],
        )
        proc.send_signal(signum)
        assert proc.wait(60) == 0, stderr.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    output = stderr.read_text()
    for noise in ("Exception in thread", "StackOverflowError", "\tat ", "Traceback"):
        assert noise not in output, output[-3000:]
    lines = said(output)
    assert len(lines) == 3 and "started, writing to" in lines[0], lines
    assert lines[1:] == ["spark-stream: stopping", lines[2]], lines
    assert lines[2].startswith("spark-stream: stopped after batch "), lines
    assert not spark_lines(output), output[-3000:]
    stopped = lake_ids(lake)
    assert 0 < len(stopped) < total and max(stopped.values()) == 1  # mid-stream, no duplicate
    # Between two batches' writes: the lake holds exactly the committed batches. The batch
    # after them was held at its start and wrote nothing (with batches back to back there is
    # no idle moment; the command used to wait 25 s and then interrupt a write).
    committed = sorted(int(p.name) for p in commits.glob("[0-9]*"))
    written = sorted(int(p.name.rsplit("-", 1)[1]) for p in lake.glob("dt=*/batch=*"))
    assert written == committed == list(range(len(committed))), (written, committed)
    assert lines[2] == f"spark-stream: stopped after batch {committed[-1]}", lines
    done = spark_stream(
        config,
        {
            **os.environ,
            "LOGHUBD_SPARK_STREAM__AVAILABLE_NOW": "true",
            "LOGHUBD_SPARK_STREAM__MAX_LOG_GROUPS_PER_TRIGGER": "0",
            "PYSPARK_PYTHON": str(late_python(tmp_path, sys.executable)),
        },
        tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    restarts = [line for line in done.stderr.splitlines() if RESTARTING in line]
    # Once for the late first start; a busy host can make the second start miss Spark's 10 s
    # as well (as seen in test_stream_e2e's late-source test).
    assert 1 <= len(restarts) <= 2 and "(attempt 2 of 3)" in restarts[0], done.stderr[-3000:]
    assert restarts[0].startswith("spark-stream: "), restarts
    ids = lake_ids(lake)
    assert sorted(ids) == list(range(total)) and max(ids.values()) == 1


@pytest.mark.timeout(180)
def test_a_signal_while_the_command_waits_to_start_the_query_again_ends_it(
    loghubd_server: ServerProcess, tmp_path: Path
) -> None:
    """The query's source process connects back too late (`late_python`), and the command
    says it will start the query again in 2 s. A SIGTERM in those 2 s ends the wait and the
    command: the query is not started again, and the command says the query failed and why
    (exit 1). It used to sleep the back-off out, start the query again, and only then stop."""
    project = "streamstopbackoff"
    produce(loghubd_server.endpoint, project, "app", 20, shards=1, group_size=10)
    config = tmp_path / "stream.toml"
    config.write_text(
        f'[source]\nendpoint = "{loghubd_server.endpoint}"\nproject = "{project}"\n'
        'logstore = "app"\n[consumer]\ngroup = "backoff"\n'
        f'[spark_stream]\npath = "{tmp_path / "lake"}"\n'
        f'checkpoint_location = "{tmp_path / "chk"}"\nsql = "SELECT * FROM {{logs}}"\n'
        'master = "local[1]"\n'
        f"{DRIVER_CONF}"
    )
    env = {**os.environ, "PYSPARK_PYTHON": str(late_python(tmp_path, sys.executable))}
    proc, stderr = spawn(config, tmp_path, env)
    try:
        wait_until(
            lambda: RESTARTING in stderr.read_text() or proc.poll() is not None,
            120,
            stderr.read_text,
        )
        assert proc.poll() is None, stderr.read_text()[-3000:]
        proc.send_signal(signal.SIGTERM)
        # Well inside the 2 s back-off, a query start and its 10 s wait for the late process.
        assert proc.wait(8) == 1, stderr.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    output = stderr.read_text()
    lines = [line for line in output.splitlines() if "spark-stream: " in line]
    assert len(lines) == 3 and RESTARTING in lines[0] and "in 2 s" in lines[0], lines
    assert lines[1] == "spark-stream: stopping", lines
    assert lines[2].startswith("spark-stream: the query failed: "), lines
    assert "Python worker failed to connect back" in lines[2], lines
    assert "Traceback" not in output and "\tat " not in output, output[-3000:]
