"""A real PostgreSQL server for the tests and the benchmark: Debian's `postgresql` binaries,
a fresh cluster in a temporary directory, on a free port, started and killed by us.

PostgreSQL refuses to run as root, so as root it runs as the `postgres` system user (the
Debian package creates it) through `setpriv`. `scripts/test.sh` installs the package
(`scripts/debs.sh`); without it, `PgServer()` fails naming what is missing.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

from loghubd.testing import PortReservation


def _binaries() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    if not found:
        raise RuntimeError(
            "PostgreSQL server binaries not found (/usr/lib/postgresql/*/bin/postgres): "
            "install Debian's `postgresql` package (scripts/test.sh does, via scripts/debs.sh)"
        )
    return Path(found[-1]).parent


class PgServer:
    """One cluster; `start()`/`kill()`/`restart()` drive its postmaster."""

    def __init__(self) -> None:
        self.bin = _binaries()
        self.dir = Path(tempfile.mkdtemp(prefix="loghubd-pg-"))
        self.data = self.dir / "data"
        # Held for the cluster's life, restarts included: the postmaster listens with
        # SO_REUSEADDR, so it binds the reserved port, and nobody else can meanwhile.
        self._reservation = PortReservation()
        self.port = self._reservation.port
        self.log_path = self.dir / "postgres.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._prefix: list[str] = []
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.dir, user.pw_uid, user.pw_gid)
            self._prefix = [
                "setpriv",
                f"--reuid={user.pw_uid}",
                f"--regid={user.pw_gid}",
                "--init-groups",
            ]
        subprocess.run(
            [*self._prefix, str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres",
             "--auth=trust", "-E", "UTF8", "--no-sync", "--locale=C"],
            check=True,
            capture_output=True,
        )  # fmt: skip

    @property
    def dsn(self) -> str:
        return self.dsn_for("postgres")

    def dsn_for(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def start(self, timeout: float = 30.0) -> PgServer:
        # fsync off: a killed postmaster loses nothing the kernel holds (only a machine crash
        # would), and the tests kill processes, not machines.
        args = [*self._prefix, str(self.bin / "postgres"), "-D", str(self.data),
                "-p", str(self.port), "-k", str(self.dir), "-c", "listen_addresses=127.0.0.1",
                "-c", "fsync=off", "-c", "max_connections=200"]  # fmt: skip
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self.dsn, connect_timeout=2):
                    return self
            except psycopg.OperationalError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"postgres did not start:\n{self.log_tail()}") from None
                time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL of the postmaster (its backends exit when they notice it is gone)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        # Backends of a killed postmaster linger until they notice; a new postmaster refuses
        # to start while they hold the shared memory, so wait for them.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and self._backends():
            time.sleep(0.1)

    def _backends(self) -> list[int]:
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                if (entry / "cwd").resolve() == self.data:  # backends run in the data dir
                    pids.append(int(entry.name))
        return pids

    def restart(self) -> None:
        self.kill()
        self.start()

    def create_database(self, name: str) -> str:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.dsn_for(name)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # fast shutdown
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._reservation.release()
        shutil.rmtree(self.dir, ignore_errors=True)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""
