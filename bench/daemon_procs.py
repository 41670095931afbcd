"""daemon_bench's moving parts: the consumer processes under test (`loghubd run`, the SDK's
ConsumerWorker), the gate that holds every shard until told to leave, the data loader.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C

PROJECT = "benchd"
LS_SMALL = "small"  # 200 k logs, 10 per group, 4 shards
LS_BIG = "big"  # ~200 k logs, 100-1000 per group, 4 shards
LS_HO = "handover"  # 8 shards, a little data
HERE = Path(__file__).resolve().parent
POLL = 0.05


# -- processes ---------------------------------------------------------------------------------


class Consumer:
    """A consumer process under test (loghubd daemon or SDK worker)."""

    kind = ""

    def __init__(self, proc: subprocess.Popen[bytes], t_spawn: float) -> None:
        self.proc = proc
        self.t_spawn = t_spawn  # time.time() just before Popen

    @property
    def pid(self) -> int:
        return self.proc.pid

    def cpu(self) -> float:
        return C.cpu_seconds(self.pid)

    def stop(self, sig: int = signal.SIGTERM, wait: float = 30.0) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                return self.proc.wait(wait)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                return self.proc.wait(5)
        return self.proc.returncode


class Daemon(Consumer):
    kind = "loghubd"

    def __init__(self, proc: subprocess.Popen[bytes], t_spawn: float, ops_port: int) -> None:
        super().__init__(proc, t_spawn)
        self.ops = f"http://127.0.0.1:{ops_port}"

    def get(self, path: str, timeout: float = 2.0) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.ops + path, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    scrapes = 0
    last_batch = 0.0  # the latest loghubd_last_batch_timestamp_seconds seen

    def consumed(self) -> float | None:
        self.scrapes += 1
        try:
            _s, body = self.get("/metrics")
        except (OSError, urllib.error.URLError):
            return None
        total = 0.0
        for line in body.decode().splitlines():
            if line.startswith("loghubd_consumed_logs_total{"):
                total += float(line.rsplit(" ", 1)[1])
            elif line.startswith("loghubd_last_batch_timestamp_seconds{"):
                self.last_batch = max(self.last_batch, float(line.rsplit(" ", 1)[1]))
        return total

    def ready(self) -> bool:
        try:
            return self.get("/readyz")[0] == 200
        except (OSError, urllib.error.URLError):
            return False

    def status(self) -> dict[str, Any] | None:
        try:
            s, body = self.get("/status")
        except (OSError, urllib.error.URLError):
            return None
        if s != 200:
            return None
        doc: dict[str, Any] = json.loads(body)
        return {**doc["sources"][0], **doc}  # the (only) source's fields at the top level


def start_daemon(
    work: Path,
    port: int,
    logstore: str,
    group: str,
    name: str,
    *,
    heartbeat: float,
    timeout: float | None = None,
    core: int = C.LOAD_CORE,
    records: bool = True,
) -> Daemon:
    cfg = work / f"{name}.toml"
    ops_port = C.daemon_config(
        cfg,
        port=port,
        project=PROJECT,
        logstore=logstore,
        group=group,
        name=name,
        processor="null",
        options=f"records = {'true' if records else 'false'}",
        consumer=f"heartbeat_interval = {heartbeat}"
        + (f"\ntimeout = {timeout}" if timeout else ""),
    )
    t = time.time()
    proc = C.spawn_daemon(cfg, work / f"{name}.log", core=core)
    return Daemon(proc, t, ops_port)


class SdkWorker(Consumer):
    kind = "sdk"

    def __init__(self, proc: subprocess.Popen[bytes], t_spawn: float) -> None:
        super().__init__(proc, t_spawn)
        self.events: list[dict[str, Any]] = []
        self._buf = b""
        assert proc.stdout is not None
        os.set_blocking(proc.stdout.fileno(), False)

    def poll_events(self) -> list[dict[str, Any]]:
        assert self.proc.stdout is not None
        try:
            chunk = self.proc.stdout.read()
        except BlockingIOError:
            chunk = None
        if chunk:
            self._buf += chunk
            *lines, self._buf = self._buf.split(b"\n")
            self.events += [json.loads(x) for x in lines if x.strip()]
        return self.events

    def done_event(self) -> dict[str, Any] | None:
        return next((e for e in self.poll_events() if e["event"] == "done"), None)


def start_sdk(
    work: Path,
    port: int,
    logstore: str,
    group: str,
    name: str,
    expect: int,
    *,
    heartbeat: int = 2,
    core: int = C.LOAD_CORE,
    records: bool = True,
) -> SdkWorker:
    err = open(work / f"{name}.log", "ab")  # noqa: SIM115
    t = time.time()
    proc = subprocess.Popen(
        [
            "taskset",
            "-c",
            str(core),
            sys.executable,
            str(HERE / "_sdk_consumer.py"),
            "--port",
            str(port),
            "--project",
            PROJECT,
            "--logstore",
            logstore,
            "--group",
            group,
            "--name",
            name,
            "--expect",
            str(expect),
            "--heartbeat",
            str(heartbeat),
            "--fetch-interval",
            "0.2",
            *(["--records"] if records else []),
        ],
        stdout=subprocess.PIPE,
        stderr=err,
        cwd=work,
    )
    err.close()
    return SdkWorker(proc, t)


def wait_for(what: str, cond: Any, timeout: float, interval: float = POLL) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


def wait_done(c: Consumer, expect: int, timeout: float, poll: float = POLL) -> float:
    """Block until `c` processed `expect` logs; returns the unix time it was seen."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if c.proc.poll() is not None:
            raise RuntimeError(f"{c.kind} exited with {c.proc.returncode}")
        if isinstance(c, SdkWorker):
            ev = c.done_event()
            if ev:
                return float(ev["t"])
        else:
            assert isinstance(c, Daemon)
            n = c.consumed()
            if n is not None and n >= expect:
                # the daemon's own clock, like the SDK's: when its last batch was finished
                return c.last_batch
        time.sleep(poll)
    raise TimeoutError(f"{c.kind} did not process {expect} logs within {timeout}s")


# -- the gate: a consumer that holds every shard until told to leave -------------------------


class Gate:
    """Joins `group` first and keeps every shard (heartbeats from a background thread)."""

    def __init__(self, port: int, logstore: str, group: str) -> None:
        self.port, self.logstore, self.group = port, logstore, group
        self.name = "gate"
        self._stop = False
        self._loop = asyncio.new_event_loop()
        self.error: BaseException | None = None

    async def _run(self, joined: Any) -> None:
        async with C.session() as s:
            sls = C.Sls(s, self.port, PROJECT)
            await sls.create_group(self.logstore, self.group, 10)
            held: list[int] = []
            for _ in range(3):
                held = await sls.heartbeat(self.logstore, self.group, self.name, held)
            joined(held)
            while not self._stop:
                held = await sls.heartbeat(self.logstore, self.group, self.name, held)
                await asyncio.sleep(0.25)
            await sls.leave(self.logstore, self.group, self.name)

    def start(self) -> list[int]:
        import threading

        got: list[list[int]] = []
        ev = threading.Event()

        def joined(held: list[int]) -> None:
            got.append(held)
            ev.set()

        def run() -> None:
            try:
                self._loop.run_until_complete(self._run(joined))
            except BaseException as e:
                self.error = e
                ev.set()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        ev.wait(20)
        if self.error:
            raise self.error
        return got[0]

    def open(self) -> None:
        """Leave the group: the consumer under test gets every shard at its next heartbeat."""
        self._stop = True
        self._thread.join(10)
        if self.error:
            raise self.error


# -- data ------------------------------------------------------------------------------------


async def load_data(port: int, small_groups: int, big_groups: int) -> dict[str, int]:
    async with C.session() as s:
        sls = C.Sls(s, port, PROJECT)
        await sls.create_project()
        for ls, shards in ((LS_SMALL, 4), (LS_BIG, 4), (LS_HO, 8)):
            await sls.create_logstore(ls, shards)
        small = C.make_bodies([10] * small_groups, seed=3)
        sizes = (100, 250, 500, 1000)
        big = C.make_bodies([sizes[i % 4] for i in range(big_groups)], seed=4)
        await C.put_all(sls, LS_SMALL, small, 4)
        await C.put_all(sls, LS_BIG, big, 4)
        await C.put_all(sls, LS_HO, C.make_bodies([10] * 80, seed=5), 4)
        return {
            LS_SMALL: sum(b.logs for b in small),
            LS_BIG: sum(b.logs for b in big),
            "small_bytes": sum(b.raw_size for b in small),
            "big_bytes": sum(b.raw_size for b in big),
        }


def group_consumers(port: int, logstore: str, group: str) -> list[str]:
    async def get() -> list[str]:
        async with C.session() as s:
            st = await C.Sls(s, port, PROJECT).group_status(logstore, group)
            return list(st["consumers"])

    try:
        return asyncio.run(get())
    except RuntimeError:
        return []
