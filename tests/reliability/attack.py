"""A resource attack on a real `loghubd serve` (issue 13, items 5-7): concurrent large uploads,
slowloris connections and normal traffic at once, with the server's memory sampled.

- `uploads` clients (half signed with a valid key, half unsigned) each send a ~10 MB PutLogs
  body again and again for `duration` seconds; a 503 is retried after a second, as the SDK
  does;
- `slow_heads` connections send a request head one byte a second, `slow_bodies` send a signed
  head and then their body one KB a second: each must be closed by the server within its
  timeout (`--header-timeout`, `--body-timeout`);
- one normal client sends small signed PutLogs, GetCursor and ListShards calls and records
  each one's latency;
- the server's RSS is read from /proc every 50 ms.

`AttackRun.run()` returns the figures; tests/reliability/test_attack.py asserts on them and
bench/serve_attack.py prints them (the RELIABILITY.md section).
"""

from __future__ import annotations

import http.client
import socket
import statistics
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loghubd.protocol import pb, signing
from loghubd.testing.process import ServerProcess

AK, SECRET = "LTAIattack000001", "attack-secret"
PROJECT, LOGSTORE = "attack", "ls"
HOST = f"{PROJECT}.sls.local"
PUT_PATH = f"/logstores/{LOGSTORE}/shards/lb"


@dataclass(frozen=True)
class AttackConfig:
    uploads: int = 40
    upload_bytes: int = 10_000_000
    slow_heads: int = 25
    slow_bodies: int = 25
    duration: float = 12.0
    header_timeout: float = 3.0
    body_timeout: float = 5.0
    extra_args: tuple[str, ...] = ()


@dataclass
class AttackResult:
    baseline_rss_mb: float = 0.0
    peak_rss_mb: float = 0.0
    uploads: Counter[str] = field(default_factory=Counter)
    slow_head_closed_s: list[float] = field(default_factory=list)
    slow_body_closed_s: list[float] = field(default_factory=list)
    normal_latency_s: list[float] = field(default_factory=list)
    normal_failures: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        lat = sorted(self.normal_latency_s)

        def pct(p: float) -> float:
            return round(lat[min(len(lat) - 1, int(p * len(lat)))] * 1000, 1) if lat else 0.0

        return {
            "baseline_rss_mb": round(self.baseline_rss_mb, 1),
            "peak_rss_mb": round(self.peak_rss_mb, 1),
            "growth_mb": round(self.peak_rss_mb - self.baseline_rss_mb, 1),
            "uploads": dict(self.uploads),
            "slow_heads_closed_max_s": round(max(self.slow_head_closed_s, default=-1), 2),
            "slow_heads_open": sum(1 for t in self.slow_head_closed_s if t < 0),
            "slow_bodies_closed_max_s": round(max(self.slow_body_closed_s, default=-1), 2),
            "slow_bodies_open": sum(1 for t in self.slow_body_closed_s if t < 0),
            "normal_requests": len(lat),
            "normal_failures": len(self.normal_failures),
            "normal_p50_ms": pct(0.50),
            "normal_p99_ms": pct(0.99),
            "normal_max_ms": round(lat[-1] * 1000, 1) if lat else 0.0,
        }


def rss_mb(pid: int, name: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def big_log_group(size: int) -> bytes:
    group = pb.LogGroup()
    value = "x" * 1000
    for i in range(size // 1030):
        log = group.Logs.add(Time=1_700_000_000)
        log.Contents.add(Key="i", Value=str(i))
        log.Contents.add(Key="v", Value=value)
    data: bytes = group.SerializeToString()
    return data


def signed_headers(
    method: str, path: str, body: bytes, params: dict[str, str] | None = None, **extra: str
) -> dict[str, str]:
    headers = {"host": HOST, "x-log-apiversion": "0.6.0", "content-length": str(len(body))}
    headers.update(extra)
    signing.sign_v1(signing.Credentials(AK, SECRET), method, path, params or {}, headers, body)
    return headers


def head_bytes(method: str, path: str, headers: dict[str, str]) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def keys_file(directory: Path) -> Path:
    path = directory / "attack-keys.toml"
    path.write_text(f'[[keys]]\nid = "{AK}"\nsecret = "{SECRET}"\n')
    return path


class AttackRun:
    def __init__(self, workdir: Path, config: AttackConfig) -> None:
        self.cfg = config
        self.workdir = workdir
        self.server = ServerProcess(
            workdir / "data",
            extra_args=[
                "--access-keys", str(keys_file(workdir)),
                "--header-timeout", str(config.header_timeout),
                "--body-timeout", str(config.body_timeout),
                *config.extra_args,
            ],
        )  # fmt: skip
        self.result = AttackResult()
        # How long the server drains a body it refused unread (loghubd/server/runner.py).
        self.lingering_s = min(10.0, config.body_timeout)
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def run(self) -> AttackResult:
        self.server.start()
        try:
            self._setup()
            assert self.server.proc is not None
            pid = self.server.proc.pid
            time.sleep(0.5)
            self.result.baseline_rss_mb = rss_mb(pid)
            body = big_log_group(self.cfg.upload_bytes)
            threads = [threading.Thread(target=self._sample, args=(pid,))]
            threads += [threading.Thread(target=self._normal)]
            for i in range(self.cfg.uploads):
                threads.append(threading.Thread(target=self._upload, args=(body, i % 2 == 0)))
            for i in range(self.cfg.slow_heads):
                threads.append(threading.Thread(target=self._slow, args=(False, i)))
            for i in range(self.cfg.slow_bodies):
                threads.append(threading.Thread(target=self._slow, args=(True, i)))
            for t in threads:
                t.start()
            time.sleep(self.cfg.duration)
            self._stop.set()
            for t in threads:
                t.join(timeout=60)
            self.result.peak_rss_mb = max(self.result.peak_rss_mb, rss_mb(pid, "VmHWM"))
            return self.result
        finally:
            self._stop.set()
            self.server.kill()

    # -- parts -------------------------------------------------------------------------------

    def _request(
        self, method: str, path: str, body: bytes = b"", params: dict[str, str] | None = None,
        **extra: str,
    ) -> tuple[int, bytes]:  # fmt: skip
        target = path + ("?" + "&".join(f"{k}={v}" for k, v in params.items()) if params else "")
        conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=60)
        try:
            conn.request(method, target, body, signed_headers(method, path, body, params, **extra))
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def _setup(self) -> None:
        project = f'{{"projectName": "{PROJECT}", "description": ""}}'.encode()
        status, text = self._request("POST", "/", project, **{"content-type": "application/json"})
        assert status == 200, text
        store = f'{{"logstoreName": "{LOGSTORE}", "ttl": 1, "shardCount": 2}}'.encode()
        status, text = self._request(
            "POST", "/logstores", store, **{"content-type": "application/json"}
        )
        assert status == 200, text

    def _sample(self, pid: int) -> None:
        while not self._stop.is_set():
            now = rss_mb(pid)
            with self._lock:
                self.result.peak_rss_mb = max(self.result.peak_rss_mb, now)
            time.sleep(0.05)

    def _upload(self, body: bytes, signed: bool) -> None:
        extra = {"content-type": "application/x-protobuf", "x-log-bodyrawsize": str(len(body))}
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                if signed:
                    status, _ = self._request("POST", PUT_PATH, body, **extra)
                else:
                    conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=60)
                    try:
                        conn.request("POST", PUT_PATH, body, {"Host": HOST, **extra})
                        resp = conn.getresponse()
                        status, _ = resp.status, resp.read()
                    finally:
                        conn.close()
                outcome = f"{'signed' if signed else 'unsigned'} {status}"
            except OSError as exc:
                outcome = f"{'signed' if signed else 'unsigned'} {type(exc).__name__}"
                if not signed and time.monotonic() - started >= self.lingering_s:
                    # The server answered 401 at the head and drained the body for its
                    # lingering time (the body timeout), then cut it: this machine could not
                    # send 10 MB in that time. A cut any sooner is a failure.
                    outcome = "unsigned 401 (body cut after the body timeout)"
                status = 0
            with self._lock:
                self.result.uploads[outcome] += 1
            if status == 503:
                self._stop.wait(1.0)  # as the SDK does

    def _slow(self, with_body: bool, i: int) -> None:
        started = time.monotonic()
        closed = -1.0
        try:
            with socket.create_connection(("127.0.0.1", self.server.port), timeout=1) as sock:
                if with_body:
                    size = 1_000_000
                    headers = signed_headers(
                        "POST", PUT_PATH, b"", **{"content-type": "application/x-protobuf",
                                                  "content-md5": "0" * 32}
                    )  # fmt: skip
                    headers["content-length"] = str(size)
                    sock.sendall(head_bytes("POST", PUT_PATH, headers))
                    drip = b"\0" * 1024
                else:
                    sock.sendall(f"GET /logstores/{LOGSTORE}/shards HTTP/1.1\r\n".encode())
                    drip = b"X"
                deadline = started + self.cfg.duration + 30
                while time.monotonic() < deadline:
                    try:
                        sock.sendall(drip)
                        data = sock.recv(4096)
                        if not data:  # the server closed it (after a 408 or at once)
                            closed = time.monotonic() - started
                            break
                    except TimeoutError:
                        continue
                    except OSError:
                        closed = time.monotonic() - started
                        break
        except OSError:
            closed = time.monotonic() - started
        r = self.result
        with self._lock:
            (r.slow_body_closed_s if with_body else r.slow_head_closed_s).append(closed)

    def _normal(self) -> None:
        small = pb.LogGroup()
        small.Logs.add(Time=int(time.time())).Contents.add(Key="k", Value="v")
        raw = small.SerializeToString()
        calls = [
            ("POST", PUT_PATH, raw, None,
             {"content-type": "application/x-protobuf", "x-log-bodyrawsize": str(len(raw))}),
            ("GET", f"/logstores/{LOGSTORE}/shards/0", b"", {"type": "cursor", "from": "end"}, {}),
            ("GET", f"/logstores/{LOGSTORE}/shards", b"", None, {}),
        ]  # fmt: skip
        n = 0
        while not self._stop.is_set():
            method, path, body, params, extra = calls[n % len(calls)]
            n += 1
            started = time.monotonic()
            try:
                status, text = self._request(method, path, body, params, **extra)
                if status != 200:
                    self.result.normal_failures.append(f"{method} {path}: {status} {text[:200]!r}")
            except OSError as exc:
                self.result.normal_failures.append(f"{method} {path}: {exc!r}")
            self.result.normal_latency_s.append(time.monotonic() - started)
            self._stop.wait(0.05)


def median_of(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0
