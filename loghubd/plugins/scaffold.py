"""`loghubd new-plugin`: the files of a new processor plugin package, ready to install and
test. `files(...)` is pure (path → text); `write(...)` puts them in a new directory, and says
in one line why when it cannot (a `UserError`: no traceback, exit 2 for a directory that
cannot be used).

The package it makes has what `plugins/loghubd-example` shows: a `ProcessorSpec` with its
options declared, option checks with `loghubd.processors.options` (every bad key reported at
once, each named, in one `ConfigError`), a processor that saves its checkpoint after
its output is written and makes it durable in `flush()`, the `loghubd` entry point, and
tests with `loghubd.testing` (a unit test on `make_batch` + `RecordingTracker`, and an
end-to-end run against the `loghubd_server` fixture).
"""

from __future__ import annotations

import errno
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from string import Template

import loghubd
from loghubd.admin.errors import FAILED, USAGE, UserError

_DIST = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")
_PROCESSOR = re.compile(r"[a-z][a-z0-9_]*")


def names(distribution: str, processor: str | None = None) -> tuple[str, str, str]:
    """(distribution, import package, processor name) for `distribution`, e.g.
    `loghubd-audit` → (`loghubd-audit`, `loghubd_audit`, `audit`). Raises ValueError."""
    if not _DIST.fullmatch(distribution):
        raise ValueError(
            f"{distribution!r}: a distribution name is lowercase words joined by '-' "
            "(e.g. loghubd-audit)"
        )
    package = distribution.replace("-", "_")
    name = processor or distribution.removeprefix("loghubd-").replace("-", "_")
    if not _PROCESSOR.fullmatch(name):
        raise ValueError(f"{name!r}: a processor name is lowercase letters, digits and '_'")
    return distribution, package, name


def files(distribution: str, processor: str | None = None) -> dict[str, str]:
    dist, package, name = names(distribution, processor)
    values = {
        "dist": dist,
        "package": package,
        "name": name,
        "loghubd_version": loghubd.__version__,
    }
    return {
        Template(path.replace("PACKAGE", package)).substitute(values): Template(text).substitute(
            values
        )
        for path, text in _FILES.items()
    }


def write(root: Path, made: Mapping[str, str]) -> None:
    """Write `made` (from `files`) under `root`, which must not exist yet. A `root` that
    cannot be made (under a file, not writable) is a UserError with exit code 2 naming it and
    why; a file that cannot be written then (a full disk) one with exit code 1, and what was
    made of `root` is removed, so that the command can simply be run again."""
    if root.exists() or root.is_symlink():
        raise UserError(USAGE, f"{root} already exists")
    try:
        root.mkdir(parents=True)
    except OSError as exc:
        raise UserError(USAGE, f"{root} cannot be made: {_why(root, exc)}") from None
    for relative, text in made.items():
        path = root / relative
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        except OSError as exc:
            shutil.rmtree(root, ignore_errors=True)
            raise UserError(FAILED, f"cannot write {path}: {_reason(exc)}") from None


def _why(root: Path, exc: OSError) -> str:
    if exc.errno == errno.ENOTDIR:  # name the file in the way, not only "Not a directory"
        for path in reversed(root.parents):
            if path.exists() and not path.is_dir():
                return f"{path} is not a directory"
    return f"{_reason(exc)}; pick another --dir"


def _reason(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno) if exc.errno is not None else None
    return f"{exc.strerror or exc}" + (f" ({name})" if name else "")


_FILES = {
    "pyproject.toml": """\
[build-system]
requires = ["setuptools>=77", "wheel"]
build-backend = "setuptools.build_meta"

[project]
name = "$dist"
version = "0.1.0"
description = "A loghubd processor plugin: $name"
requires-python = ">=3.11"
dependencies = ["loghubd>=$loghubd_version", "prometheus-client"]

[project.optional-dependencies]
test = ["pytest>=8"]

# loghubd finds processors through this entry-point group.
[project.entry-points.loghubd]
$name = "$package"

[tool.setuptools]
packages = ["$package"]

[tool.pytest.ini_options]
testpaths = ["tests"]
""",
    "README.md": """\
# $dist

A [loghubd](https://pypi.org/project/loghubd/) processor plugin: the processor `$name`.

```toml
[processor]
name = "$name"

[processor.$name]
path = "/var/lib/loghubd/$name"
```

```sh
pip install -e '.[test]'
loghubd plugins          # lists $name with this distribution and its options
pytest                   # unit tests and one run against a real `loghubd serve`
```
""",
    "PACKAGE/__init__.py": '''\
"""The `$name` processor: writes each log as a JSON line to `<path>/shard-<n>.jsonl`.

Change `process` to do your work; keep the order: write, then save the checkpoint.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter

from loghubd import Batch, ProcessorContext, ProcessorSpec, Tracker, hookimpl
from loghubd.processors.options import ConfigError, option_problem, typed_options

OPTIONS = {"path": "directory of the output, shard-<n>.jsonl each (required)"}


class Metrics:
    """This processor's own series: the daemon serves them on /metrics with the source's
    label. Count here what only the processor knows (retries inside it, what it buffers)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.written = Counter(
            "loghubd_${name}_written_logs_total", "Logs written as JSON lines", registry=registry
        )


class Processor:
    """One per shard the daemon holds."""

    def __init__(self, directory: Path, shard: int, metrics: Metrics) -> None:
        self.path = directory / f"shard-{shard}.jsonl"
        self.metrics = metrics
        self.file: Any = None

    def initialize(self, shard: int) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115

    def process(self, batch: Batch, tracker: Tracker) -> None:
        for record in batch.logs():
            self.file.write(json.dumps(record) + "\\n")
        self.file.flush()
        self.metrics.written.inc(batch.log_count)
        # Only now is the batch written: the checkpoint may pass it (the daemon commits it
        # within consumer.checkpoint_interval, after calling flush()).
        tracker.save_checkpoint(persist=False)

    def flush(self) -> None:
        os.fsync(self.file.fileno())

    def shutdown(self, tracker: Tracker) -> None:
        self.flush()
        self.file.close()


class Factory:
    """Made once per daemon from [processor.$name]; makes one Processor per shard."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        # Every problem of the table in one ConfigError (a ValueError), each naming its key,
        # so that check-config prints them all: unknown keys (with "did you mean"), wrong
        # types (typed_options leaves those keys out of `given`), then value problems.
        problems: list[str] = []
        given = typed_options("$name", options, {"path": str}, problems)
        if "path" not in options:
            problems.append(option_problem("$name", "path", "required"))
        elif given.get("path") == "":
            problems.append(option_problem("$name", "path", "must not be empty"))
        if problems:
            raise ConfigError(problems)
        self.directory = Path(given["path"])
        self.metrics = Metrics(CollectorRegistry())  # until the daemon binds it

    def bind(self, context: ProcessorContext) -> None:
        """Called by the daemon before the first shard: where it consumes from, and the
        registry its /metrics serves (instruments() makes them once per registry)."""
        self.metrics = context.instruments(Metrics)

    def __call__(self, shard: int) -> Processor:
        return Processor(self.directory, shard, self.metrics)


@hookimpl
def loghubd_register_processors() -> list[ProcessorSpec]:
    return [ProcessorSpec("$name", Factory, "JSON lines per shard", OPTIONS)]
''',
    "tests/test_$name.py": '''\
"""Tests of the `$name` processor with loghubd.testing: a batch built from given logs and a
recording tracker, then a real daemon against a real `loghubd serve` (the `loghubd_server`
fixture comes with loghubd)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from loghubd.processors.options import ConfigError
from loghubd.testing import RecordingTracker, ServerProcess, make_batch, make_context
from prometheus_client import CollectorRegistry
from $package import Factory


def test_writes_every_log_then_saves_the_checkpoint(tmp_path: Path) -> None:
    factory, registry = Factory({"path": str(tmp_path)}), CollectorRegistry()
    factory.bind(make_context(metrics_registry=registry))  # as the daemon does
    processor = factory(shard=1)
    processor.initialize(1)
    tracker = RecordingTracker()
    processor.process(make_batch([{"msg": "a"}, {"msg": "b"}], shard=1), tracker)
    processor.shutdown(tracker)
    lines = (tmp_path / "shard-1.jsonl").read_text().splitlines()
    assert [json.loads(line)["msg"] for line in lines] == ["a", "b"]
    assert tracker.saved == [False]
    assert registry.get_sample_value("loghubd_${name}_written_logs_total") == 2


def test_every_bad_option_is_refused_at_once_naming_it() -> None:
    with pytest.raises(ConfigError) as refused:  # a ValueError
        Factory({"pth": "/tmp/x", "colour": "red"})
    assert refused.value.problems == (
        "processor.$name.pth: unknown key (did you mean processor.$name.path?)",
        "processor.$name.colour: unknown key",
        "processor.$name.path: required",
    )


def test_a_daemon_consumes_through_it(tmp_path: Path, loghubd_server: ServerProcess) -> None:
    loghubd = [sys.executable, "-m", "loghubd"]
    subprocess.run(
        [*loghubd, "produce", "--endpoint", loghubd_server.endpoint, "--project", "plugin-test",
         "--logstore", "app", "--count", "300", "--create-shards", "2"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    config = tmp_path / "loghubd.toml"
    config.write_text(f"""
[source]
endpoint = "{loghubd_server.endpoint}"
project = "plugin-test"
logstore = "app"
[consumer]
group = "$name-test"
end = {int(time.time()) + 1}
[processor]
name = "$name"
[processor.$name]
path = "{tmp_path / 'out'}"
[ops]
listen = "127.0.0.1:0"
""")
    run = subprocess.run([*loghubd, "run", "-c", str(config)], capture_output=True, timeout=60)
    assert run.returncode == 0, run.stderr.decode()[-3000:]
    ids = [
        json.loads(line)["id"]
        for f in (tmp_path / "out").glob("shard-*.jsonl")
        for line in f.read_text().splitlines()
    ]
    assert sorted(ids, key=int) == [str(i) for i in range(300)]
''',
}
