"""Pipelines for the tests (importable by the daemon processes: this directory goes on their
PYTHONPATH). Keep it importable without pytest."""

from __future__ import annotations

import os
from typing import Any

FAIL_FLAG = "LOGHUBD_SPARK_TEST_FAIL_FILE"


def tag_levels(df: Any) -> Any:
    """A Python-function pipeline: keep WARN and ERROR logs, add the id as a number and the
    message length."""
    from pyspark.sql import functions as F

    return (
        df.where(F.col("contents")["level"].isin("WARN", "ERROR"))
        .withColumn("id", F.col("contents")["id"].cast("bigint"))
        .withColumn("msg_len", F.length(F.col("contents")["msg"]))
    )


def fail_while_flagged(df: Any) -> Any:
    """Fails while the file named by $LOGHUBD_SPARK_TEST_FAIL_FILE exists (a failing job)."""
    flag = os.environ.get(FAIL_FLAG, "")
    if flag and os.path.exists(flag):
        raise RuntimeError("injected pipeline failure")
    return df


def not_a_dataframe(df: Any) -> Any:
    return 42


def raises(df: Any) -> Any:
    raise ValueError("boom from user code")


def not_a_dataframe_once_there_are_rows(df: Any) -> Any:
    """Passes the empty batch `spark-stream` checks before it starts, fails a real one."""
    return df if df.isEmpty() else 42


SLOW_FLAG = "LOGHUBD_SPARK_TEST_SLOW_FILE"
SLOW_ID = "777"


def slow_while_flagged(df: Any) -> Any:
    """A Python UDF that holds the write on the log with id 777 while the file named by
    $LOGHUBD_SPARK_TEST_SLOW_FILE exists (up to 10 minutes); it touches `<file>.sleeping`
    when it starts waiting. Other logs (the warm-up's ids are 0..15) pass at once."""
    from pyspark.sql import functions as F

    flag = os.environ.get(SLOW_FLAG, "")

    @F.udf("string")  # type: ignore[misc]
    def hold(value: str | None) -> str | None:
        import time

        if value == SLOW_ID and flag and os.path.exists(flag):
            with open(flag + ".sleeping", "w"):
                pass
            deadline = time.monotonic() + 600
            while os.path.exists(flag) and time.monotonic() < deadline:
                time.sleep(0.2)
        return value

    return df.withColumn("held", hold(F.col("contents")["id"]))
