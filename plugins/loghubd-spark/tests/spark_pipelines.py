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
