"""Class-data sharing (AppCDS) for the Spark driver JVMs the suite starts.

About forty tests start a Spark driver JVM: every end-to-end daemon with the `spark`
processor, every `loghubd spark-stream` run, the shared test sessions. Most of each start is
loading and verifying the same classes from Spark's jars. A dynamic CDS archive of them
halves it: a SparkSession and its first job took 12-14 s without and 5.5-7 s with one, on
this project's 2-core VM.

The suite's controller makes the archive in the background when the run starts (`start`): one
small Spark job run by `python -m tests.spark_cds <archive>` under
`-XX:ArchiveClassesAtExit`, about 30 s. It is made once per Java, pyspark and jar set (their
digest is in its name) and kept under the checkout's `.venv/`. Every driver JVM the suite
starts gets `-XX:SharedArchiveFile` through `SPARK_SUBMIT_OPTS` (`environ`). spark-submit
adds that variable to the driver's options only, so standalone masters, workers and executors
do not get it.

A JVM started before the archive is in place, or with another class path, runs without it
(and without the JDK's own archive): the same behaviour, only a slower start. The JVM's own
CDS warnings are switched off, so the output that tests read does not change. Operators can
do the same for the daemon (plugins/loghubd-spark/README.md, "Sizing").
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
# The JVM says nothing about an archive it cannot use (made by another Java, another class
# path): it only starts the slow way.
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def archive() -> Path | None:
    """Where this Java, pyspark and jar set's archive is (made or not); None without them."""
    java = shutil.which("java")
    try:
        import pyspark
    except ImportError:
        return None
    if java is None:
        return None
    jars = Path(pyspark.__file__).parent / "jars"
    digest = hashlib.sha256()
    digest.update(os.path.realpath(java).encode())
    digest.update(str(os.stat(os.path.realpath(java)).st_mtime_ns).encode())
    digest.update(pyspark.__version__.encode())
    for jar in sorted(jars.glob("*.jar")):
        digest.update(f"{jar.name}:{jar.stat().st_size}".encode())
    return DIRECTORY / f"spark-{pyspark.__version__}-{digest.hexdigest()[:16]}.jsa"


def environ(env: MutableMapping[str, str], path: Path) -> None:
    """Make the driver JVMs started with `env` use the archive at `path` once it exists."""
    opts = f"-XX:SharedArchiveFile={path} {QUIET}"
    env["SPARK_SUBMIT_OPTS"] = f"{env.get('SPARK_SUBMIT_OPTS', '')} {opts}".strip()


def start(path: Path) -> subprocess.Popen[bytes] | None:
    """Make the archive in the background, unless it is there; its output goes to a log file
    beside it (`log_of`)."""
    if path.exists():
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_of(path), "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.spark_cds", str(path)],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # stopped as a group (its JVM too) if the run ends first
        )


def log_of(path: Path) -> Path:
    return path.with_suffix(".log")


def make(path: Path) -> None:
    """Run a small job through the paths the suite's JVMs take (Arrow in, SQL, partitioned
    Parquet and JSON out, reads back), let the JVM exit (it writes the archive then), and put
    the archive in place atomically."""
    import pyarrow as pa
    from pyspark.sql import SparkSession

    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    # Not on top of an archive (`environ`'s): a dynamic archive is made over the JDK's own.
    kept = [o for o in os.environ.get("SPARK_SUBMIT_OPTS", "").split() if "SharedArchive" not in o]
    os.environ["SPARK_SUBMIT_OPTS"] = " ".join([*kept, f"-XX:ArchiveClassesAtExit={tmp}"])
    work = path.with_name(f"work-{os.getpid()}")
    spark = (
        SparkSession.builder.master("local[1]")
        .appName("loghubd-cds")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .getOrCreate()
    )
    try:
        n = 200
        table = pa.table(
            {
                "id": pa.array(range(n), pa.int64()),
                "msg": [f"log {i}" for i in range(n)],
                "contents": pa.array(
                    [[("id", str(i))] for i in range(n)], pa.map_(pa.string(), pa.string())
                ),
                "dt": ["2025-01-01"] * n,
            }
        )
        spark.createDataFrame(table).createOrReplaceTempView("logs")
        out = spark.sql(
            "SELECT id, upper(msg) AS msg, contents['id'] AS cid, dt, 'b1' AS batch "
            "FROM logs WHERE id % 2 = 0"
        )
        writer = out.write.mode("overwrite").option("partitionOverwriteMode", "dynamic")
        writer.partitionBy("dt", "batch").parquet(str(work / "parquet"))
        out.write.mode("overwrite").partitionBy("dt", "batch").json(str(work / "json"))
        spark.read.parquet(str(work / "parquet")).groupBy("dt").count().collect()
        spark.read.json(str(work / "json")).selectExpr("count(DISTINCT id)").collect()
        out.write.format("noop").mode("overwrite").save()
        gateway = spark.sparkContext._gateway
    finally:
        spark.stop()
    proc = gateway.proc  # the JVM (spark-submit execs it)
    proc.stdin.close()  # its end of input: it exits, writing the archive
    if proc.wait(timeout=300) != 0:
        raise SystemExit(f"the JVM exited with {proc.returncode}: no archive")
    shutil.rmtree(work, ignore_errors=True)
    os.replace(tmp, path)


if __name__ == "__main__":
    make(Path(sys.argv[1]))
