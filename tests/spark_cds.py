"""Class-data sharing for the Spark driver JVMs the suite starts (`loghubd spark-archive`,
loghubd_spark/cds.py).

About forty tests start a Spark driver JVM: every end-to-end daemon with the `spark`
processor, every `loghubd spark-stream` run, the shared test sessions. With an archive each
starts in about half the time. The suite's controller makes one in the background as the run
starts (`start`: `loghubd spark-archive`, 50-80 s under the suite's load), once per Java,
pyspark and jar set (their digest is in its name), kept under the checkout's `.venv/`. Every
driver JVM the suite starts gets it through `SPARK_SUBMIT_OPTS` (`environ`). A JVM started
before the archive is in place runs without it (and without the JDK's own archive): the same
behaviour, only a slower start.
"""

from __future__ import annotations

import hashlib
import os
import shutil
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


def start(path: Path) -> subprocess.Popen[bytes] | None:
    """Make the archive in the background, unless it is there; its output goes to a log file
    beside it (`log_of`)."""
    if path.exists():
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_of(path), "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "loghubd", "spark-archive", str(path)],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # stopped as a group (its JVM too) if the run ends first
        )


def log_of(path: Path) -> Path:
    return path.with_suffix(".log")
