"""Fixtures of the spark processor's tests: ONE tuned SparkSession per test session.

local[1], one shuffle partition, no UI, serial GC, small heap: the JVM starts in a few
seconds and every test uses tiny data (the 200,000-row end-to-end tests are the exception).
Python workers run this interpreter (PYSPARK_PYTHON), so they can import the plugin.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # spark_harness, spark_pipelines
    sys.path.insert(0, str(HERE))

SESSION_CONF = {
    "spark.sql.shuffle.partitions": "1",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
    "spark.driver.memory": "768m",
    "spark.sql.session.timeZone": "UTC",
}


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from pyspark.sql import SparkSession

    # Python workers (the `loghub` streaming source's reads) run this interpreter, whose
    # environment has loghubd and the plugin (the default is `python3` from PATH).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master("local[1]").appName("loghubd-spark-tests")
    for key, value in SESSION_CONF.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
