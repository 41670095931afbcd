"""Every daemon loads every installed plugin's entry point at start, whatever processor it
runs: loading them must not import a heavy library that only one processor needs (psycopg,
pyspark, pyarrow cost tens to hundreds of ms of start-up each). Checked in a fresh
interpreter, as a daemon starts."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("psycopg", "pyspark", "pyarrow", "duckdb", "pandas", "numpy")

PROBE = """
import json, sys
from loghubd.plugins.manager import Plugins
plugins = Plugins()
names = sorted(info.name for info in plugins.describe())
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(json.loads(sys.argv[1])))
print(json.dumps({"processors": names, "heavy": heavy}))
"""


def test_loading_the_plugins_imports_no_heavy_library() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(HEAVY)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    # the first-party plugins are installed (the test command installs them), so this looks
    # at their entry points, not only at the built-ins
    assert {"postgres", "spark", "parquet", "jsonl"} <= set(seen["processors"]), seen
    assert seen["heavy"] == [], f"imported while loading plugins: {seen['heavy']}"


def test_importing_loghubd_does_not_import_prometheus_client() -> None:
    """Every command imports `loghubd` (and plugins import its API): the metrics library is
    paid only by what serves or counts metrics (`ProcessorContext` makes its registry
    lazily)."""
    probe = "import sys, loghubd, loghubd.cli; print('prometheus_client' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
