"""Built-in processors, registered through the same hook as any external plugin.

- ``jsonl``: one file of JSON lines per shard under ``path``; data is fsynced before the
  shard's checkpoint is committed, so a committed checkpoint never covers unwritten logs.
- ``stdout``: JSON lines on standard output (demos).
- ``null``: counts the logs and drops them (smoke tests, benchmarks); with ``records = true``
  it builds every log's dict first, as a real processor would.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from loghubd import hookimpl
from loghubd.files import write_all
from loghubd.models import Batch
from loghubd.plugins.api import ProcessorFactory, ProcessorSpec, Tracker


def check_options(name: str, options: Mapping[str, Any], allowed: Mapping[str, type]) -> None:
    """Refuse unknown keys and wrong types in a processor's own table, naming the key."""
    for key, value in options.items():
        if key not in allowed:
            raise ValueError(f"processor.{name}.{key}: unknown key")
        if not isinstance(value, allowed[key]):
            raise ValueError(
                f"processor.{name}.{key}: expected {allowed[key].__name__}, "
                f"got {type(value).__name__}"
            )


class JsonlProcessor:
    def __init__(self, directory: Path, shard: int) -> None:
        self.path = directory / f"shard-{shard}.jsonl"
        self._fd = -1
        self._lock = threading.Lock()

    def initialize(self, shard: int) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # O_APPEND: one write() per batch, so daemons sharing a directory never interleave
        # inside a line.
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def process(self, batch: Batch, tracker: Tracker) -> None:
        data = "".join(json.dumps(r) + "\n" for r in batch.logs()).encode()
        with self._lock:
            write_all(self._fd, data)
        tracker.save_checkpoint(persist=False)

    def flush(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.fsync(self._fd)

    def shutdown(self, tracker: Tracker) -> None:
        with self._lock:
            if self._fd >= 0:
                os.fsync(self._fd)
                os.close(self._fd)
                self._fd = -1


class _JsonlFactory:
    def __init__(self, options: Mapping[str, Any]) -> None:
        check_options("jsonl", options, {"path": str})
        if not options.get("path"):
            raise ValueError("processor.jsonl.path: required (a directory for the output)")
        self.directory = Path(options["path"])

    def __call__(self, shard: int) -> JsonlProcessor:
        return JsonlProcessor(self.directory, shard)


class StdoutProcessor:
    _lock = threading.Lock()

    def initialize(self, shard: int) -> None:
        pass

    def process(self, batch: Batch, tracker: Tracker) -> None:
        text = "".join(json.dumps(r) + "\n" for r in batch.logs())
        with self._lock:
            sys.stdout.write(text)
            sys.stdout.flush()
        tracker.save_checkpoint(persist=False)

    def shutdown(self, tracker: Tracker) -> None:
        pass


class NullProcessor:
    def __init__(self, records: bool = False) -> None:
        self.records = records
        self.count = 0

    def initialize(self, shard: int) -> None:
        pass

    def process(self, batch: Batch, tracker: Tracker) -> None:
        if self.records:
            n = sum(1 for _record in batch.logs())
        else:
            n = batch.log_count
        self.count += n
        tracker.save_checkpoint(persist=False)

    def shutdown(self, tracker: Tracker) -> None:
        pass


def _stdout(options: Mapping[str, Any]) -> ProcessorFactory:
    check_options("stdout", options, {})
    return lambda shard: StdoutProcessor()


def _null(options: Mapping[str, Any]) -> ProcessorFactory:
    check_options("null", options, {"records": bool})
    records = bool(options.get("records", False))
    return lambda shard: NullProcessor(records)


@hookimpl
def loghubd_register_processors() -> Iterable[ProcessorSpec]:
    return [
        ProcessorSpec("jsonl", _JsonlFactory, "JSON lines, one file per shard, fsynced"),
        ProcessorSpec("stdout", _stdout, "JSON lines on standard output"),
        ProcessorSpec("null", _null, "count the logs, keep nothing"),
    ]
