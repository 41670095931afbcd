"""A real `loghubd serve` child process, for tests and benchmarks.

Started on a free port with its own data directory; `kill()` sends a real signal, `restart()`
starts it again on the same port and data, so tests can prove what survives `kill -9`.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


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
        cmd = [
            sys.executable,
            "-m",
            "loghubd",
            "--log-format",
            "json",
            "serve",
            "--data-dir",
            str(self.data_dir),
            "--port",
            str(self.port),
            *self.extra_args,
        ]
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child for its lifetime
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"loghubd serve exited with {self.proc.returncode}: {self.log_tail()}"
                )
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.02)
        raise TimeoutError(f"loghubd serve not listening after {timeout}s: {self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

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
