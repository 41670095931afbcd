"""Every daemon loads every installed plugin's entry point at start, whatever processor it
runs: loading them must not import a heavy library that only one processor needs (psycopg,
pyspark, pyarrow cost tens to hundreds of ms of start-up each). Checked in a fresh
interpreter, as a daemon starts."""

from __future__ import annotations

import json
import os
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


def test_commands_that_connect_nowhere_do_not_import_aiohttp() -> None:
    """aiohttp's client costs ~0.15-0.25 s at import (it builds two TLS contexts): `--version`,
    `--help`, `plugins` and `check-config` of a config that uses no network at start (loading
    every plugin, the http processor's registration included) must not pay for it."""
    probe = """
import runpy, sys
sys.argv = ["loghubd", *sys.argv[1:]]
try:
    runpy.run_module("loghubd", run_name="__main__")
except SystemExit:
    pass
sys.stderr.write("aiohttp-imported=%s\\n" % ("aiohttp" in sys.modules))
"""
    for args in (["--version"], ["status", "--help"], ["plugins"], ["plugins", "--json"]):
        done = subprocess.run(
            [sys.executable, "-c", probe, *args], capture_output=True, text=True, timeout=60
        )
        assert "aiohttp-imported=False" in done.stderr, (args, done.stderr[-2000:])


def test_every_public_name_resolves_in_a_fresh_interpreter() -> None:
    """The lazily re-exported names (`from loghubd import SlsClient`, as plugins write it;
    `from loghubd.sls import Unreachable`) resolve on first use, each to its defining object."""
    probe = """
import importlib, loghubd, loghubd.sls
for package in (loghubd, loghubd.sls):
    for name in package.__all__:
        value = getattr(package, name)
        assert value is not None, (package.__name__, name)
from loghubd import SlsClient, provider_for, Unreachable
from loghubd.sls.client import SlsClient as defined
assert SlsClient is defined
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_a_daemon_reading_batches_in_c_imports_neither_protobuf_nor_zstandard() -> None:
    """Every daemon imports `loghubd.app` and the built-in processors; with the C extensions
    its batches are counted, decoded, encoded as JSON lines and converted to Arrow without the
    protobuf classes, and its pulls come in LZ4. protobuf's descriptor pool and zstandard cost
    ~70 ms of start-up CPU (median; bench/README.md, "Seventeenth session: start-up
    imports"): they are imported when first needed."""
    from loghubd.protocol import compress, pb

    group = pb.LogGroup(Topic="t")
    group.Logs.add(Time=1).Contents.add(Key="k", Value="v")
    raw = pb.frame_log_groups([group.SerializeToString()] * 3)
    body = compress.compress(compress.LZ4, raw)
    probe = """
import sys
import loghubd.app, loghubd.cli
from loghubd.models import Batch
from loghubd.plugins.manager import Plugins
from loghubd.protocol import compress
Plugins()
raw = compress.decompress("lz4", bytes.fromhex(sys.argv[1]), int(sys.argv[2]))
batch = Batch(0, "c", "n", raw, 3)
assert batch.log_count == 3 and len(list(batch.logs())) == 3 and batch.jsonl().count(b"\\n") == 3
assert batch.part(1, 2, "c1", "c2").log_count == 1
assert batch.arrow().num_rows == 3  # the columnar view (arrow, parquet) too
print(sorted(m for m in ("google.protobuf", "zstandard") if m in sys.modules))
"""
    done = subprocess.run(
        [sys.executable, "-c", probe, body.hex(), str(len(raw))],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "LOGHUBD_NO_C": ""},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", done.stdout
