"""Real processes for the spark processor's end-to-end tests: `loghubd produce`, `loghubd run`
(with `processor = "spark"`), polling the group's checkpoints, reading the daemon's metrics.

Importable without pytest. Kept separate from tests/integration (the daemon's own harness).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import aiohttp

from loghubd import SlsClient, testing
from loghubd.models import Batch
from loghubd.protocol import cursor as cursors
from loghubd.protocol.signing import Credentials
from loghubd.testing import BackgroundProducer, PortReservation

HERE = Path(__file__).resolve().parent
T = TypeVar("T")

# What every test JVM gets: small, quick to start, no UI.
TEST_SPARK_CONF: dict[str, Any] = {
    "spark.ui.enabled": False,
    "spark.sql.shuffle.partitions": 1,
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
    "spark.driver.memory": "768m",
}


def wait_until(
    predicate: Callable[[], T],
    timeout: float,
    message: str | Callable[[], str] = "condition not met",
    interval: float = 0.1,
) -> T:
    """`loghubd.testing.wait_until`, polling every 0.1 s by default: these predicates read
    logs and ask the server over HTTP while a JVM is busy."""
    return testing.wait_until(predicate, timeout, message, interval)


def toml(data: Mapping[str, Any], prefix: str = "") -> str:
    """A small TOML writer: scalars first, then sub-tables; keys always quoted."""
    lines: list[str] = []
    tables: list[tuple[str, Mapping[str, Any]]] = []
    for key, value in data.items():
        if isinstance(value, Mapping):
            tables.append((key, value))
        else:
            lines.append(f"{json.dumps(key)} = {_scalar(value)}")
    out = ""
    if prefix and (lines or not tables):
        out += f"[{prefix}]\n"
    out += "".join(line + "\n" for line in lines)
    for key, table in tables:
        name = f"{prefix}.{json.dumps(key)}" if prefix else json.dumps(key)
        out += "\n" + toml(table, name)
    return out


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    raise TypeError(f"no TOML for {value!r}")


def produce(
    endpoint: str,
    project: str,
    logstore: str,
    count: int,
    *,
    shards: int = 0,
    start: int = 0,
    group_size: int = 100,
    rate: float = 0.0,
    wait: bool = True,
    **options: Any,
) -> BackgroundProducer:
    """What `loghubd produce` writes, from a thread of this process (no process start per
    call); with `wait`, returns once every log is written. `options`: the rest of
    loghubd.produce.ProduceOptions (keys to sign with)."""
    producer = BackgroundProducer(
        endpoint, project, logstore, count, start=start, group_size=group_size, rate=rate,
        create_shards=shards, **options,
    ).start()  # fmt: skip
    if wait:
        summary = producer.wait(300)
        assert summary["written"] == count, summary
    return producer


class Source:
    """Synchronous inspection of a logstore and a group through SlsClient."""

    def __init__(self, endpoint: str, project: str, logstore: str) -> None:
        self.endpoint, self.project, self.logstore = endpoint, project, logstore

    def _run(self, fn: Callable[[SlsClient], Any]) -> Any:
        async def go() -> Any:
            async with aiohttp.ClientSession() as session:
                client = SlsClient(
                    session, self.endpoint, self.project, lambda: Credentials("", "")
                )
                return await fn(client)

        return asyncio.run(go())

    def shard_ids(self) -> list[int]:
        shards = self._run(lambda c: c.list_shards(self.logstore))
        return sorted(int(s["shardID"]) for s in shards)

    def end_positions(self) -> dict[int, int]:
        async def go(c: SlsClient) -> dict[int, int]:
            out = {}
            for s in await c.list_shards(self.logstore):
                sid = int(s["shardID"])
                out[sid] = cursors.decode(await c.get_cursor(self.logstore, sid, "end"))
            return out

        result: dict[int, int] = self._run(go)
        return result

    def batches(self, shard: int, groups_per_pull: int) -> list[Batch]:
        """Everything in `shard`, as the daemon would receive it in pulls of that size."""

        async def go(c: SlsClient) -> list[Batch]:
            out: list[Batch] = []
            at = await c.get_cursor(self.logstore, shard, "begin")
            end = await c.get_cursor(self.logstore, shard, "end")
            while at != end:
                p = await c.pull(self.logstore, shard, at, groups_per_pull)
                out.append(Batch(shard, at, p.next_cursor, p.data, p.count))
                at = p.next_cursor
            return out

        result: list[Batch] = self._run(go)
        return result

    def checkpoints(self, group: str) -> dict[int, int]:
        try:
            rows = self._run(lambda c: c.checkpoints(self.logstore, group))
        except Exception:
            return {}
        return {
            int(r["shard"]): cursors.decode(r["checkpoint"]) for r in rows if r.get("checkpoint")
        }

    def caught_up(self, group: str) -> bool:
        ends = self.end_positions()
        cps = self.checkpoints(group)
        return all(cps.get(s) == e for s, e in ends.items())


class SparkDaemon:
    """`loghubd run` with the spark processor, in its own directory."""

    def __init__(
        self,
        workdir: Path,
        endpoint: str,
        project: str,
        logstore: str,
        spark: Mapping[str, Any],
        *,
        group: str = "spark-test",
        consumer: Mapping[str, Any] | None = None,
    ) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        # Held for the daemon's life, restarts included (see tests/integration/daemon_harness).
        self._ops_reservation = PortReservation()
        self.port = self._ops_reservation.port
        self.config_path = workdir / "loghubd.toml"
        self.log_path = workdir / "daemon.log"
        self.group = group
        self.proc: subprocess.Popen[bytes] | None = None
        self.runs = 0
        cfg = {
            "source": {"endpoint": endpoint, "project": project, "logstore": logstore},
            "consumer": {
                "group": group,
                "heartbeat_interval": 0.5,
                "timeout": 10.0,
                "checkpoint_interval": 1.0,
                "fetch_interval": 0.05,
                "idle_fetch_interval": 0.05,
                "shutdown_grace": 40.0,
                "retry_initial_backoff": 0.2,
                "retry_max_backoff": 2.0,
                **(consumer or {}),
            },
            "processor": {
                "name": "spark",
                "spark": {"master": "local[2]", **spark, "conf": {**TEST_SPARK_CONF}},
            },
            "ops": {"listen": f"127.0.0.1:{self.port}"},
            "log": {"level": "info", "format": "json"},
        }
        cfg["processor"]["spark"]["conf"].update(spark.get("conf", {}))  # type: ignore[index]
        self.config_path.write_text(toml(cfg))

    def start(self, env: Mapping[str, str] | None = None) -> SparkDaemon:
        self.runs += 1
        environ = dict(os.environ)
        environ["PYTHONPATH"] = os.pathsep.join(
            [str(HERE), *filter(None, [environ.get("PYTHONPATH")])]
        )
        environ.update(env or {})
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        log.write(f"--- run {self.runs} env={dict(env or {})}\n".encode())
        log.flush()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "loghubd", "run", "-c", str(self.config_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=environ,
            cwd=self.workdir,
        )
        log.close()
        return self

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
        except OSError:
            return 0, ""

    def wait_ready(self, timeout: float = 90.0) -> None:
        def ready() -> bool:
            if not self.alive:
                raise AssertionError(f"daemon exited early: {self.log_tail()}")
            return self._get("/readyz")[0] == 200

        wait_until(ready, timeout, lambda: f"daemon not ready: {self.log_tail()}", 0.25)

    def metric(self, name: str) -> float | None:
        status, text = self._get("/metrics")
        if status != 200:
            return None
        for line in text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        return None

    def events(self, name: str | None = None) -> Iterator[dict[str, Any]]:
        if not self.log_path.exists():
            return
        for line in self.log_path.read_text(errors="replace").splitlines():
            if not line.startswith("{"):
                continue
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if name is None or event.get("event") == name:
                    yield event

    def foreign_lines(self) -> list[str]:
        """Output lines that are not the daemon's JSON (nor this harness's run markers, the
        fault injection's notice, the JVM's own line about the vector module): Spark's console
        must stay out of it."""
        if not self.log_path.exists():
            return []
        return [
            line
            for line in self.log_path.read_text(errors="replace").splitlines()
            if line.strip()
            and not line.startswith(("{", "--- run ", "loghubd-spark: fault injection:"))
            and not line.startswith("WARNING: Using incubator modules")
        ]

    def count(self, name: str) -> int:
        return sum(1 for _ in self.events(name))

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout: float = 90.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def wait_exit(self, timeout: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)


def lake_ids(lake: Path) -> Counter[int]:
    """The `id` column of every Parquet file under `lake` (read once the writer is done)."""
    import pyarrow.parquet as pq

    ids: Counter[int] = Counter()
    for part in lake.rglob("*.parquet"):
        ids.update(pq.read_table(part, columns=["id"]).column("id").to_pylist())
    return ids


def spark_stream(
    config: Path, env: Mapping[str, str], cwd: Path, timeout: float = 200
) -> subprocess.CompletedProcess[str]:
    """`loghubd spark-stream -c config` as a process, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "loghubd", "spark-stream", "-c", str(config)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(env),
        cwd=cwd,
    )


def late_python(work: Path, python: str, sleep_s: float = 12.0) -> Path:
    """An interpreter that runs `python`, except that the first start of a streaming query's
    source process (pyspark's python_streaming_source_runner) sleeps `sleep_s` first: longer
    than the 10 s Spark waits for it to connect back. Spark's other Python workers, which it
    waits for longer, start at once."""
    mark, late = work / "late-python-slept", work / "late-python"
    late.write_text(
        "#!/bin/sh\n"
        'case "$*" in *python_streaming_source_runner*)\n'
        f"  if [ ! -e '{mark}' ]; then : > '{mark}'; sleep {sleep_s:g}; fi;;\n"
        "esac\n"
        f"exec '{python}' \"$@\"\n"
    )
    late.chmod(0o755)
    return late
