"""Shared helpers for the benchmark scripts (not a test module, not part of the package).

- CPU accounting from /proc/<pid>/stat (utime + stime of every thread of a process).
- CPU pinning (the machine has 2 cores: the server goes on core 0, the load on core 1).
- Realistic synthetic logs (~200 bytes each, serialized), built once and reused.
- A thin aiohttp SLS client for the load generator: pre-serialized, pre-compressed bodies,
  so the generator spends as little CPU per request as possible.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from loghubd.cli import prefer_jemalloc  # noqa: E402
from loghubd.protocol import compress as codec  # noqa: E402
from loghubd.protocol import pb  # noqa: E402
from loghubd.testing.process import ServerProcess, free_port  # noqa: E402

# Arrow's allocator as in a daemon (the `loghubd` command sets it) for the benchmarks that run
# Arrow in their own process (sinks_bench's processors), before anything loads pyarrow.
prefer_jemalloc(os.environ, sys.platform)

CLK_TCK = os.sysconf("SC_CLK_TCK")
SERVER_CORE = 0
LOAD_CORE = 1


# -- CPU ----------------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """utime + stime of the whole process (all threads), in seconds."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read()
    # the command name may contain spaces: split after the closing parenthesis
    fields = data[data.rindex(b")") + 2 :].split()
    utime, stime = int(fields[11]), int(fields[12])
    return (utime + stime) / CLK_TCK


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (children, their children, ...), from /proc."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    out, frontier = [], [pid]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parents.items() if pp == p]
        out += kids
        frontier += kids
    return out


def tree_cpu(pid: int | None = None, exclude: int | None = None) -> float:
    """CPU seconds of `pid` (default: this process) and every descendant alive now (a JVM,
    conversion children), without `exclude`'s subtree."""
    root = os.getpid() if pid is None else pid
    skip = {exclude, *descendants(exclude)} if exclude else set()
    total = 0.0
    for p in (root, *descendants(root)):
        if p in skip:
            continue
        with contextlib.suppress(OSError):
            total += cpu_seconds(p)
    return total


def status_bytes(pid: int, key: str) -> int:
    """A /proc/<pid>/status figure in bytes (VmHWM: peak RSS, VmRSS); 0 if it has none."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{key}:"):
                return int(line.split()[1]) * 1024
    return 0


def tree_peak_rss_mb(pid: int) -> float:
    """Peak RSS (VmHWM) of `pid` summed with its descendants', in MB."""
    return sum(status_bytes(p, "VmHWM") for p in (pid, *descendants(pid))) / 2**20


def pin(pid: int, core: int) -> None:
    """Pin every thread of `pid` (threads started later inherit the mask of their creator)."""
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except FileNotFoundError:
        tids = [pid]
    for tid in tids:
        with contextlib.suppress(OSError):  # a thread may have exited meanwhile
            os.sched_setaffinity(tid, {core})


def pin_self(core: int) -> None:
    os.sched_setaffinity(0, {core})


def machine_busy_seconds() -> float:
    """CPU seconds all cores spent busy since boot (everything but idle and iowait)."""
    with open("/proc/stat") as f:
        parts = [int(x) for x in f.readline().split()[1:]]
    return (sum(parts[:8]) - parts[3] - parts[4]) / CLK_TCK


class CpuMeter:
    """CPU seconds of a process between `start()` and `stop()`, its share of one core, the
    load generator's (this process's) share, and how busy everything else on the machine was
    (other tenants' load: the machine is shared)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.cpu0 = self.wall0 = self.self0 = self.busy0 = 0.0
        self.cpu = self.wall = self.self_cpu = self.busy = 0.0

    def start(self) -> CpuMeter:
        self.busy0 = machine_busy_seconds()
        self.self0 = cpu_seconds(os.getpid())
        self.cpu0, self.wall0 = cpu_seconds(self.pid), time.perf_counter()
        return self

    def stop(self) -> CpuMeter:
        self.cpu = cpu_seconds(self.pid) - self.cpu0
        self.wall = time.perf_counter() - self.wall0
        self.self_cpu = cpu_seconds(os.getpid()) - self.self0
        self.busy = machine_busy_seconds() - self.busy0
        return self

    @property
    def utilisation(self) -> float:
        return self.cpu / self.wall if self.wall else 0.0

    @property
    def loadgen_utilisation(self) -> float:
        return self.self_cpu / self.wall if self.wall else 0.0

    @property
    def others_cores(self) -> float:
        """Cores' worth of CPU used by processes other than the measured one and this one."""
        if not self.wall:
            return 0.0
        return max(0.0, (self.busy - self.cpu - self.self_cpu) / self.wall)

    def summary(self) -> dict[str, float]:
        return {
            "server_cpu_util": round(self.utilisation, 3),
            "loadgen_cpu_util": round(self.loadgen_utilisation, 3),
            "other_processes_cores": round(self.others_cores, 2),
        }


def compile_bytecode() -> int:
    """Write the bytecode of the checkout's own modules (loghubd, the plugins), as a wheel
    install has it: pip compiles at install time, and the SDK's site-packages have theirs.
    The editable install runs from source, so with PYTHONDONTWRITEBYTECODE set (this machine
    sets it) every daemon a benchmark starts would compile ~80 modules again, ~0.1 s of CPU
    the SDK consumer beside it does not pay. Returns how many directories were compiled."""
    import compileall

    dirs = [ROOT / "loghubd", *sorted((ROOT / "plugins").glob("*/loghubd_*"))]
    for d in dirs:
        compileall.compile_dir(d, quiet=1, workers=0)
    return len(dirs)


def machine_notes() -> dict[str, Any]:
    """The conditions of a run, for its JSON. Every benchmark calls it first, so it also
    compiles the checkout's bytecode (`compile_bytecode`) before anything is measured."""
    compile_bytecode()
    model = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break

    def git(*a: str) -> str:
        try:
            return subprocess.run(
                ["git", *a], cwd=ROOT, capture_output=True, text=True, timeout=10
            ).stdout.rstrip()  # not strip(): porcelain lines start with a status column
        except (OSError, subprocess.SubprocessError):
            return ""

    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "git_commit": git("rev-parse", "--short", "HEAD").strip(),
        "git_dirty_files": [
            x[3:]
            for x in git("status", "--porcelain", "--untracked-files=no", "loghubd").splitlines()
        ],
        "cpu": model,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "loadavg_at_start": os.getloadavg(),
        "bytecode": "compiled before the run (as a wheel install has it)",
    }


# -- daemons ------------------------------------------------------------------------------------


def loopback_env(**extra: str) -> dict[str, str]:
    """This environment without proxy variables (every benchmark talks to 127.0.0.1)."""
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    return {**env, **extra}


def daemon_config(
    path: Path,
    *,
    port: int,
    project: str,
    logstore: str,
    group: str,
    processor: str,
    options: str = "",
    consumer: str = "",
    name: str | None = None,
    log_level: str = "info",
) -> int:
    """Write a `loghubd run` config to `path`: one source on the serve at `port`, consumer
    `name` (default: the group's name) in `group`, `processor` with its table's `options`
    lines, extra `[consumer]` lines, JSON logs, ops on a free port. Returns the ops port."""
    ops = free_port()
    table = f"\n[processor.{processor}]\n{options.strip()}\n" if options.strip() else ""
    path.write_text(
        f"""[source]
endpoint = "http://127.0.0.1:{port}"
project = "{project}"
logstore = "{logstore}"

[consumer]
group = "{group}"
name = "{name or group}"
{consumer.strip()}

[processor]
name = "{processor}"
{table}
[ops]
listen = "127.0.0.1:{ops}"

[log]
level = "{log_level}"
format = "json"
"""
    )
    return ops


def spawn_daemon(
    config: Path,
    log: Path,
    *,
    core: int | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """`loghubd run -c config`, its output appended to `log`, pinned to `core` if given, run
    in the config's directory with `env` (default: `loopback_env()`)."""
    pin_cmd = ["taskset", "-c", str(core)] if core is not None else []
    with open(log, "ab") as out:
        return subprocess.Popen(
            [*pin_cmd, sys.executable, "-m", "loghubd", "run", "-c", str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env if env is not None else loopback_env(),
            cwd=config.parent,
        )


# -- synthetic logs -----------------------------------------------------------------------------

PATHS = ("/api/v1/orders", "/api/v1/users", "/api/v1/cart/items", "/healthz", "/api/v2/search")
METHODS = ("GET", "GET", "GET", "POST", "PUT", "DELETE")
LEVELS = ("INFO", "INFO", "INFO", "INFO", "WARN", "ERROR")
STATUSES = ("200", "200", "200", "201", "204", "404", "500")


def make_log_group(n_logs: int, seed: int, start_id: int = 0) -> bytes:
    """One serialized LogGroup of `n_logs` access-log-like logs, ~200 bytes each on the wire."""
    rng = random.Random(seed)
    group = pb.LogGroup(Topic="bench", Source="10.0.3.17")
    group.LogTags.add(Key="__hostname__", Value="bench-host-01")
    now = int(time.time())
    for i in range(n_logs):
        log = group.Logs.add(Time=now)
        path = rng.choice(PATHS)
        for key, value in (
            ("id", f"b{start_id + i}"),
            ("level", rng.choice(LEVELS)),
            ("method", rng.choice(METHODS)),
            ("path", f"{path}/{rng.randrange(10**6)}"),
            ("status", rng.choice(STATUSES)),
            ("latency_ms", f"{rng.random() * 300:.3f}"),
            ("user", f"u{rng.randrange(10**6):06d}"),
            ("request_id", f"{rng.getrandbits(128):032x}"),
            ("msg", "request completed" if rng.random() < 0.9 else "upstream timeout, retried"),
        ):
            log.Contents.add(Key=key, Value=value)
    data: bytes = group.SerializeToString()
    return data


@dataclass(frozen=True, slots=True)
class Body:
    """One PutLogs request body, ready to send."""

    raw_size: int
    logs: int
    compressed: bytes
    codec: str


def make_bodies(sizes: Iterable[int], codec_name: str = codec.LZ4, seed: int = 1) -> list[Body]:
    out: list[Body] = []
    next_id = 0
    for i, n in enumerate(sizes):
        raw = make_log_group(n, seed * 1_000_003 + i, next_id)
        next_id += n
        out.append(Body(len(raw), n, codec.compress(codec_name, raw), codec_name))
    return out


# -- a minimal SLS client for load generation ---------------------------------------------------


class Sls:
    """Project-scoped raw SLS calls against `loghubd serve` (Host header names the project)."""

    def __init__(self, session: aiohttp.ClientSession, port: int, project: str) -> None:
        self.s = session
        self.base = f"http://127.0.0.1:{port}"
        self.project = project
        self.host = f"{project}.sls.local"

    def _h(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        h = {"host": self.host, "x-log-apiversion": "0.6.0"}
        if extra:
            h.update(extra)
        return h

    async def call(
        self,
        method: str,
        path: str,
        params: dict[str, str] | None = None,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        ok: Sequence[int] = (200,),
    ) -> tuple[int, dict[str, str], bytes]:
        async with self.s.request(
            method,
            self.base + path,
            params=params,
            data=body,
            headers=self._h(headers),
            auto_decompress=False,
        ) as r:
            data = await r.read()
            if r.status not in ok:
                raise RuntimeError(f"{method} {path} {params}: {r.status} {data[:300]!r}")
            return r.status, dict(r.headers), data

    async def json(
        self,
        method: str,
        path: str,
        params: dict[str, str] | None = None,
        payload: object = None,
        ok: Sequence[int] = (200,),
    ) -> Any:
        body = None if payload is None else json.dumps(payload).encode()
        h = {"content-type": "application/json"} if body is not None else {}
        _s, _h, data = await self.call(method, path, params, body, h, ok)
        return json.loads(data) if data else None

    async def create_project(self) -> None:
        await self.json(
            "POST", "/", payload={"projectName": self.project, "description": "b"}, ok=(200, 400)
        )

    async def create_logstore(self, name: str, shards: int) -> None:
        await self.json(
            "POST", "/logstores", payload={"logstoreName": name, "ttl": 30, "shardCount": shards}
        )

    async def put(self, logstore: str, body: Body, hash_key: str | None = None) -> None:
        h = {"content-type": "application/x-protobuf", "x-log-bodyrawsize": str(body.raw_size)}
        if body.codec:
            h["x-log-compresstype"] = body.codec
        if hash_key is None:
            await self.call("POST", f"/logstores/{logstore}/shards/lb", None, body.compressed, h)
        else:
            await self.call(
                "POST", f"/logstores/{logstore}/shards/route", {"key": hash_key}, body.compressed, h
            )

    async def cursor(self, logstore: str, shard: int, where: str) -> str:
        d = await self.json(
            "GET", f"/logstores/{logstore}/shards/{shard}", {"type": "cursor", "from": where}
        )
        return str(d["cursor"])

    async def pull(
        self, logstore: str, shard: int, cursor: str, count: int, accept: str
    ) -> tuple[str, int, int, int]:
        """Returns (next cursor, groups, raw bytes, wire bytes); the body is not decoded."""
        _s, h, data = await self.call(
            "GET",
            f"/logstores/{logstore}/shards/{shard}",
            {"type": "log", "cursor": cursor, "count": str(count)},
            None,
            {"accept": "application/x-protobuf", "accept-encoding": accept},
        )
        lh = {k.lower(): v for k, v in h.items()}
        return lh["x-log-cursor"], int(lh["x-log-count"]), int(lh["x-log-bodyrawsize"]), len(data)

    async def create_group(self, logstore: str, group: str, timeout: int) -> None:
        await self.json(
            "POST",
            f"/logstores/{logstore}/consumergroups",
            payload={"consumerGroup": group, "timeout": timeout, "order": False},
        )

    async def heartbeat(
        self, logstore: str, group: str, consumer: str, held: Sequence[int]
    ) -> list[int]:
        out: list[int] = await self.json(
            "POST",
            f"/logstores/{logstore}/consumergroups/{group}",
            {"type": "heartbeat", "consumer": consumer},
            payload=list(held),
        )
        return out

    async def leave(self, logstore: str, group: str, consumer: str) -> None:
        await self.json(
            "POST",
            f"/logstores/{logstore}/consumergroups/{group}",
            {"type": "leave", "consumer": consumer},
        )

    async def group_status(self, logstore: str, group: str) -> dict[str, Any]:
        out: dict[str, Any] = await self.json(
            "GET", f"/logstores/{logstore}/consumergroups/{group}", {"type": "status"}
        )
        return out

    async def split(self, logstore: str, shard: int, key: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = await self.json(
            "POST", f"/logstores/{logstore}/shards/{shard}", {"action": "split", "key": key}
        )
        return out

    async def list_shards(self, logstore: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = await self.json("GET", f"/logstores/{logstore}/shards")
        return out


def session(limit: int = 0) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=limit), timeout=aiohttp.ClientTimeout(total=120)
    )


async def put_all(sls: Sls, logstore: str, bodies: Sequence[Body], concurrency: int) -> None:
    """Send every body, `concurrency` requests in flight."""
    it = iter(bodies)

    async def worker() -> None:
        for b in it:
            await sls.put(logstore, b)

    await asyncio.gather(*(worker() for _ in range(concurrency)))


def key_hash(key: str) -> str:
    return hashlib.md5(key.encode()).hexdigest()


def start_server(
    workdir: Path, name: str = "server", core: int | None = SERVER_CORE
) -> ServerProcess:
    data = workdir / name
    server = ServerProcess(data, log_path=workdir / f"{name}.log").start()
    if core is not None and server.proc is not None:
        pin(server.proc.pid, core)
    return server


def pulls_answered(server: ServerProcess) -> float:
    """PullLogs requests `server` has answered so far (every status), from its /metrics."""
    with urllib.request.urlopen(f"{server.endpoint}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("loghubd_server_requests_total{") and 'api="PullLogs"' in line
    )


def median(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def fmt(n: float, digits: int = 0) -> str:
    return f"{n:,.{digits}f}"


__all__ = [
    "ROOT",
    "Body",
    "CpuMeter",
    "ServerProcess",
    "Sls",
    "cpu_seconds",
    "fmt",
    "free_port",
    "key_hash",
    "machine_notes",
    "make_bodies",
    "make_log_group",
    "median",
    "pin",
    "pin_self",
    "pulls_answered",
    "put_all",
    "session",
    "start_server",
]
