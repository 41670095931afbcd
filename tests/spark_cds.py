"""Class-data sharing for the Spark driver JVMs the suite starts (`loghubd spark-archive`,
loghubd_spark/cds.py).

About forty tests start a Spark driver JVM: every end-to-end daemon with the `spark`
processor, every `loghubd spark-stream` run, the shared test sessions. With an archive each
starts in about half the time. One is made in the background (`start`: `loghubd
spark-archive`, about 25 s on an idle core, 50-80 s under the suite's load), once per Java,
pyspark and jar set (their digest is in its name), kept under the checkout's `.venv/`:
`scripts/test.sh` starts it before the lint and type checks (`python -m tests.spark_cds`),
so that it is made while they run; the suite's controller adopts that maker, or starts one
itself when pytest was run directly. Every
driver JVM the suite starts gets it through `SPARK_SUBMIT_OPTS` (`environ`). A JVM started
before the archive is in place runs without it (and without the JDK's own archive): the same
behaviour, only a slower start.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import MutableMapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DIRECTORY = ROOT / ".venv" / "spark-cds"
ENV = "LOGHUBD_TEST_SPARK_ARCHIVE"  # where the run's archive is (made or not yet)


def archive() -> Path | None:
    """Where this Java, pyspark and jar set's archive is (made or not); None without them."""
    java = shutil.which("java")
    try:
        import pyspark
    except ImportError:
        return None
    if java is None:
        return None
    real = os.path.realpath(java)
    digest = hashlib.sha256(f"{real}:{os.stat(real).st_mtime_ns}:{pyspark.__version__}".encode())
    for jar in sorted((Path(pyspark.__file__).parent / "jars").glob("*.jar")):
        digest.update(f"{jar.name}:{jar.stat().st_size}".encode())
    return DIRECTORY / f"spark-{pyspark.__version__}-{digest.hexdigest()[:16]}.jsa"


def environ(env: MutableMapping[str, str], path: Path) -> None:
    """Make the driver JVMs started with `env` use the archive at `path` once it exists."""
    from loghubd_spark.cds import submit_opts

    env["SPARK_SUBMIT_OPTS"] = f"{env.get('SPARK_SUBMIT_OPTS', '')} {submit_opts(path)}".strip()
    env[ENV] = str(path)


class Maker:
    """A running `loghubd spark-archive` (its own session: stopped as a group, JVM too)."""

    def __init__(self, path: Path, pid: int, proc: subprocess.Popen[bytes] | None) -> None:
        self.path, self.pid, self.proc = path, pid, proc

    def running(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        return _alive(self.pid)

    def failure(self) -> str | None:
        """Why no archive came of it (None: made, or still running)."""
        if self.running():
            return None
        if self.proc is not None:
            code = self.proc.returncode
            return None if code == 0 else f"exit {code}"
        return None if self.path.exists() else "it ended without one"

    def stop(self) -> None:
        """The run ended first: killed (made again next time)."""
        if self.running():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
            if self.proc is not None:
                self.proc.wait()


def start(path: Path) -> Maker | None:
    """Make the archive in the background, unless it is there or being made (a maker started
    by `scripts/test.sh` is adopted); its output goes to a log file beside it (`log_of`)."""
    if path.exists():
        return None
    try:
        pid = int(_pid_file(path).read_text())
    except (OSError, ValueError):
        pid = 0
    if pid > 0 and _alive(pid) and "spark-archive" in _cmdline(pid):
        return Maker(path, pid, None)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_of(path), "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "loghubd", "spark-archive", str(path)],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # stopped as a group (its JVM too) if the run ends first
        )
    _pid_file(path).write_text(str(proc.pid))
    return Maker(path, proc.pid, proc)


def _pid_file(path: Path) -> Path:
    return path.with_suffix(".pid")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by its parent) is not running.
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return True


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def log_of(path: Path) -> Path:
    return path.with_suffix(".log")


if __name__ == "__main__":  # scripts/test.sh, before the lint: started, not waited for
    where = archive()
    if where is not None:
        start(where)
