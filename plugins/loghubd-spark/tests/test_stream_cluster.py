"""The `loghub` streaming source on a real standalone Spark cluster: a master and a worker
started from the pip `pyspark` (`spark-class`, on 127.0.0.1), the worker's environment
without PYSPARK_PYTHON and without this venv on its PATH (as on a real node), so the
executors' Python comes from the driver, out of the box.

One run through `loghubd spark-stream`, then, after more logs, one through `spark-submit` on
the same checkpoint: every log exactly once, the second run resumed where the first stopped,
and both applications ran on the cluster (the master lists them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from spark_harness import lake_ids, produce, wait_until

from loghubd.testing import PortReservation, ServerProcess

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SPARK_HOME = Path(__import__("pyspark").__file__).parent
JVM = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"


def node_env() -> dict[str, str]:
    """What a cluster node has: Java and a system PATH, not this test's Python."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
    env["SPARK_HOME"] = str(SPARK_HOME)
    env["SPARK_DAEMON_MEMORY"] = "256m"
    env["SPARK_DAEMON_JAVA_OPTS"] = JVM
    return env


class Cluster:
    def __init__(self, directory: Path) -> None:
        # Held until stop(): the master and worker listen with SO_REUSEADDR (Spark's Netty
        # server sets it; so does Jetty's connector), so they bind these, and nobody else can
        # take one first (a master finding its port taken would move to the next one).
        self._ports = [PortReservation() for _ in range(3)]
        self.port, self.ui, self.worker_ui = (r.port for r in self._ports)
        self.url = f"spark://127.0.0.1:{self.port}"
        self.dir = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.procs: list[subprocess.Popen[bytes]] = []

    def _start(self, name: str, *args: str) -> None:
        env = {**node_env(), "SPARK_WORKER_DIR": str(self.dir / "work")}
        with open(self.dir / f"{name}.log", "wb") as log:
            self.procs.append(
                subprocess.Popen(
                    [str(SPARK_HOME / "bin" / "spark-class"), *args],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=self.dir,
                )
            )

    def start(self) -> Cluster:
        self._start(
            "master", "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1", "--port", str(self.port), "--webui-port", str(self.ui),
        )  # fmt: skip
        self._start(
            "worker", "org.apache.spark.deploy.worker.Worker",
            "--host", "127.0.0.1", "--cores", "2", "--memory", "1g",
            "--webui-port", str(self.worker_ui), self.url,
        )  # fmt: skip
        wait_until(lambda: self.state().get("aliveworkers") == 1, 90, self.logs)
        return self

    def state(self) -> dict[str, Any]:
        """The master's state, or {} while it cannot tell: not listening yet, or (seen once,
        the second after its web UI bound) answering /json/ with its HTML page."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui}/json/", timeout=3) as r:
                state: dict[str, Any] = json.loads(r.read())
                return state
        except (OSError, ValueError):  # JSONDecodeError is a ValueError
            return {}

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}"
            for p in sorted(self.dir.rglob("*.log")) + sorted(self.dir.rglob("stderr"))
        )

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for reservation in self._ports:
            reservation.release()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path / "cluster")
    try:
        yield c.start()
    finally:
        c.stop()


@pytest.mark.timeout(420)
def test_stream_on_a_standalone_cluster_through_the_cli_and_spark_submit(
    cluster: Cluster, loghubd_server: ServerProcess, tmp_path: Path
) -> None:
    first, second = 1_000, 600
    produce(loghubd_server.endpoint, "cluster", "app", first, shards=2)
    lake, config = tmp_path / "lake", tmp_path / "stream.toml"
    config.write_text(
        f'[source]\nendpoint = "{loghubd_server.endpoint}"\nproject = "cluster"\n'
        'logstore = "app"\n[consumer]\ngroup = "on-cluster"\n'
        f'[spark_stream]\npath = "{lake}"\ncheckpoint_location = "{tmp_path / "chk"}"\n'
        "sql = \"SELECT *, CAST(contents['id'] AS BIGINT) AS id FROM {logs}\"\n"
        f'master = "{cluster.url}"\n'
        '[spark_stream.conf]\n"spark.ui.enabled" = false\n"spark.driver.memory" = "512m"\n'
        '"spark.executor.memory" = "512m"\n"spark.sql.shuffle.partitions" = 1\n'
        f'"spark.driver.extraJavaOptions" = "{JVM}"\n"spark.executor.extraJavaOptions" = "{JVM}"\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}

    def run(cmd: list[str], **extra: str) -> None:
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=240, env={**env, **extra}, cwd=tmp_path
        )
        assert done.returncode == 0, (done.stdout + done.stderr)[-12000:]

    # 1. `loghubd spark-stream`, with the cluster as master in the file.
    loghubd = [sys.executable, "-m", "loghubd", "--debug"]
    run([*loghubd, "spark-stream", "-c", str(config), "--available-now"])
    after_first = lake_ids(lake)
    assert sorted(after_first) == list(range(first))
    assert max(after_first.values()) == 1

    # 2. More logs, then `spark-submit` of the same app on the same checkpoint: resumed.
    produce(loghubd_server.endpoint, "cluster", "app", second, start=first)
    app = subprocess.run(
        [sys.executable, "-m", "loghubd_spark.stream_app", "--path"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    run(
        [str(SPARK_HOME / "bin" / "spark-submit"), "--master", cluster.url,
         app, "-c", str(config), "--available-now"],
        SPARK_HOME=str(SPARK_HOME),
        PYSPARK_DRIVER_PYTHON=sys.executable,  # the driver needs the plugin; not the executors
    )  # fmt: skip
    total = lake_ids(lake)
    assert sorted(total) == list(range(first + second)), "missing or extra ids"
    # a second run that had not resumed from the checkpoint would have read the first 1,000
    # again under a new query id: duplicates
    assert max(total.values()) == 1, "duplicates"
    # both applications ran on the cluster, not in a local master
    finished = cluster.state().get("completedapps", [])
    assert len(finished) == 2, cluster.state()
