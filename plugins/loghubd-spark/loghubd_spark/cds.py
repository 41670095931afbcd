"""`loghubd spark-archive PATH`: a class-data sharing (AppCDS) archive of Spark's classes, so
that the Spark driver JVM of the `spark` processor and of `loghubd spark-stream` starts in about
half the time.

Most of a driver JVM's start is loading and verifying the same classes from Spark's jars. A
dynamic CDS archive holds them ready to map: a SparkSession and its first job took 12-14 s
without and 5.5-7 s with one on a 2-core VM. `make` runs one small job through the paths the
processor takes (Arrow in, SQL, partitioned Parquet and JSON out, reads back) in a JVM started
with `-XX:ArchiveClassesAtExit`, lets that JVM exit (it writes the archive then), and puts the
archive in place atomically. A JVM is pointed at it with `submit_opts` in `SPARK_SUBMIT_OPTS`,
which spark-submit gives to drivers only (not to standalone masters, workers or executors).

An archive fits one Java build and one class path: a JVM of another Java, or with other jars,
starts without it, the slow way (its CDS warnings are switched off by `submit_opts`).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

# The JVM's warnings about an archive it cannot use (another Java, another class path): it
# then only starts the slow way, and must not print into output people or tests read.
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
JVM_EXIT_TIMEOUT_S = 300.0  # writing the archive at the JVM's exit: ~10 s on 2 cores


class ArchiveError(RuntimeError):
    pass


def submit_opts(path: Path) -> str:
    """The JVM options that make a driver use the archive at `path`."""
    return f"-XX:SharedArchiveFile={path} {QUIET}"


def make(path: Path) -> int:
    """Make the archive at `path`; returns its size in bytes."""
    import pyarrow as pa
    from pyspark.sql import SparkSession

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    work = path.with_name(f".{path.name}.{os.getpid()}.work")
    # Not on top of another archive: a dynamic archive is made over the JDK's own.
    kept = [o for o in os.environ.get("SPARK_SUBMIT_OPTS", "").split() if "SharedArchive" not in o]
    # QUIET: the dump lists every class it leaves out (signed jars, generated classes).
    os.environ["SPARK_SUBMIT_OPTS"] = " ".join([*kept, f"-XX:ArchiveClassesAtExit={tmp}", QUIET])
    spark = (
        SparkSession.builder.master("local[1]")
        .appName("loghubd-spark-archive")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .getOrCreate()
    )
    try:
        spark.sparkContext.setLogLevel("ERROR")
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
        gateway: Any = spark.sparkContext._gateway
        jvm = gateway.proc  # the JVM itself: spark-submit execs it
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    jvm.stdin.close()  # the end of its input: it exits, and writes the archive then
    code = jvm.wait(timeout=JVM_EXIT_TIMEOUT_S)
    if code != 0 or not tmp.exists():
        tmp.unlink(missing_ok=True)
        raise ArchiveError(f"the JVM exited with {code} without writing the archive")
    os.replace(tmp, path)
    return path.stat().st_size
