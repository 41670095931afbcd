"""A real `loghubd serve` child process, for tests and benchmarks.

Started on a free port with its own data directory; `kill()` sends a real signal, `restart()`
starts it again on the same port and data, so tests can prove what survives `kill -9`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import weakref
from pathlib import Path
from typing import Any


def log_events(path: Path, name: str | None = None) -> list[dict[str, Any]]:
    """A child's JSON log lines from `path` (only those whose `event` is `name`, if given);
    lines that are not JSON objects are skipped, and a missing file has none."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and (name is None or event.get("event") == name):
            out.append(event)
    return out


def free_port() -> int:
    """A local port free now, and free for anybody to take from the moment this returns: for
    a port nothing should listen on, or one a server retries on (`ServerProcess`). A child
    process's port stays reserved with `PortReservation`; a server in this process binds
    port 0 itself (`loghubd.testing.sites.serve_on_loopback`)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class PortReservation:
    """`count` consecutive local ports kept for a child process that binds them later (a
    daemon's `ops.listen`; `loghubd run --workers N`, whose worker i listens on `port` + i).

    `free_port` leaves a window between picking a port and the child binding it, in which
    another process can take it (an outgoing connection's ephemeral port, another test's
    server): the child then fails with "address already in use". Here the ports stay bound,
    with SO_REUSEADDR and without listening, until `release()`: the kernel hands them to
    nobody else, and the child, which binds with SO_REUSEADDR too (aiohttp's
    `reuse_address`, as `loghubd run`'s ops listener does), can still listen on them, also
    after a restart."""

    def __init__(self, count: int = 1) -> None:
        for _ in range(100):
            held = [_reusable(0)]
            self.port: int = held[0].getsockname()[1]
            try:
                held.extend(_reusable(port) for port in range(self.port + 1, self.port + count))
            except OSError:  # one of the next ports is taken: another first port
                _close_all(held)
                continue
            # Closed on `release()`, or when the reservation is collected (its owner gone):
            # never left for the sockets' own finalizers (a ResourceWarning).
            self._release = weakref.finalize(self, _close_all, held)
            return
        raise RuntimeError(f"no {count} consecutive free local ports found")

    def release(self) -> None:
        self._release()


def _reusable(port: int) -> socket.socket:
    """A socket bound to local `port` (0: any) with SO_REUSEADDR, not listening."""
    held = socket.socket()
    try:
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.bind(("127.0.0.1", port))
    except OSError:
        held.close()
        raise
    return held


def _close_all(sockets: list[socket.socket]) -> None:
    for held in sockets:
        held.close()


def free_ports(count: int) -> int:
    """The first of `count` consecutive local ports that are all free now. They can be taken
    before a child binds them: for a child's ports, `PortReservation(count)` keeps them."""
    for _ in range(100):
        base = free_port()
        held: list[socket.socket] = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                held.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue  # one of them is taken: another base
        finally:
            for s in held:
                s.close()
    raise RuntimeError(f"no {count} consecutive free local ports found")


def _logged(text: str, event: str) -> bool:
    """Whether a JSON log line of `text` is the event `event`."""
    for line in text.splitlines():
        if event in line:
            try:
                if json.loads(line).get("event") == event:
                    return True
            except ValueError:
                continue
    return False


class ServerProcess:
    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        extra_args: list[str] | None = None,
        log_path: Path | None = None,
    ) -> None:
        self.data_dir = data_dir
        self._port_chosen_here = port is None  # another free port may be tried at start
        self.port = port or free_port()
        self.extra_args = list(extra_args or [])
        self.log_path = log_path or data_dir.with_name(data_dir.name + ".log")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 10.0) -> ServerProcess:
        """Start it and wait until it listens. A child that does not listen within `timeout`
        is killed before the error is raised (no server is left running behind a failed
        start). A free port taken by someone else in the meantime (`free_port` can only
        promise it was free) is retried on another port, when the port was chosen here.
        Listening means the child logged `serving`: a bare connect could reach whoever else
        holds the port while the child is failing to bind it."""
        for _attempt in range(3):
            try:
                return self._start_once(timeout)
            except RuntimeError as exc:
                if not (self._port_chosen_here and "address already in use" in str(exc)):
                    raise
                self.port = free_port()
        return self._start_once(timeout)

    def _log_since(self, offset: int) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def _start_once(self, timeout: float) -> ServerProcess:
        cmd = [
            sys.executable,
            "-m",
            "loghubd",
            "--log-format",
            "json",
            "--log-level",
            "info",  # start() waits for the `serving` line
            "serve",
            "--data-dir",
            str(self.data_dir),
            "--port",
            str(self.port),
            *self.extra_args,
        ]
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child for its lifetime
        offset = log.tell()
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"loghubd serve exited with {self.proc.returncode}: "
                    f"{self._log_since(offset).strip()[-2000:]}"
                )
            if _logged(self._log_since(offset), "serving"):
                return self
            time.sleep(0.02)
        self.kill()
        raise TimeoutError(f"loghubd serve not listening after {timeout}s: {self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        """The server's JSON log lines (optionally only those whose `event` is `name`)."""
        return log_events(self.log_path, name)

    def kill(self, sig: int = signal.SIGKILL, wait: float = 10.0) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        os.kill(self.proc.pid, sig)
        return self.proc.wait(wait)

    def stop(self) -> int | None:
        """Graceful stop (SIGTERM); returns the exit code."""
        return self.kill(signal.SIGTERM)

    def restart(self) -> ServerProcess:
        self.kill()
        return self.start()
