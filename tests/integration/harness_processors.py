"""Test processors, loaded by the daemons under test as an ordinary loghubd plugin.

`plugin_env()` writes a `.dist-info` with a `loghubd` entry point naming this module into a
directory that goes on the daemon's PYTHONPATH, so the daemon loads it through the ordinary
entry-point mechanism, with nothing installed into the virtualenv. Its processors:

- `record`: one JSON line per log (`shard`, `id`, `key`, `seq`) appended to ONE file shared
  by all shards of the daemon, so the file order is the order in which that daemon delivered;
  its factory can be held in `start()` and note its `close()`.
- `flaky`: like `jsonl`, but the batch holding the log `fail_id` raises on its first
  `fail_times` attempts; every attempt at it is appended to `attempts` (time, cursors).
- `stuck`: like `jsonl`, but one shard's `process()` (sync or async) never returns, or
  (`kind = "blocking"`) blocks the event loop for `block_s` once.
- `held`: like `jsonl`, but each shard's first batch is only held (a deferred ack, nothing
  written) until it comes again; with `ask = true` its `redelivery()` asks for it, after
  `fail_asks` wrong answers (raising, then returning a number, in turn).

Keep the module importable without pytest: the daemon process imports it.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import anyio

from loghubd import hookimpl
from loghubd.models import Batch
from loghubd.plugins.api import ProcessorSpec, SinkUnreachable, Tracker
from loghubd.processors.jsonl import JsonlProcessor

REPO_ROOT = Path(__file__).resolve().parents[2]


def plugin_env(site: Path) -> dict[str, str]:
    """Environment that makes a daemon load this module as a plugin through an entry point."""
    dist = site / "loghubd_daemon_tests-0.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: loghubd-daemon-tests\nVersion: 0\n"
    )
    (dist / "entry_points.txt").write_text(
        "[loghubd]\ndaemontests = tests.integration.harness_processors\n"
    )
    path = [str(site), str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]
    return {"PYTHONPATH": os.pathsep.join(p for p in path if p)}


_record_lock = threading.Lock()


class RecordProcessor:
    """Appends `{"n", "shard", "id", "key", "seq"}` per log to one file shared by the daemon's
    shards, under one lock, so the file order is this daemon's delivery order (`n` counts
    across the process)."""

    _fds: dict[str, int] = {}
    _n = 0

    def __init__(self, path: str) -> None:
        self.path = path

    def initialize(self, shard: int) -> None:
        with _record_lock:
            if self.path not in self._fds:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
                flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
                RecordProcessor._fds[self.path] = os.open(self.path, flags, 0o644)

    def process(self, batch: Batch, tracker: Tracker) -> None:
        with _record_lock:
            lines = []
            for r in batch.logs():
                RecordProcessor._n += 1
                rec = {"n": self._n, "shard": batch.shard, "id": r.get("id")}
                rec.update({"key": r.get("key"), "seq": r.get("seq")})
                lines.append(json.dumps(rec) + "\n")
            os.write(self._fds[self.path], "".join(lines).encode())
        tracker.save_checkpoint(persist=False)

    def flush(self) -> None:
        os.fsync(self._fds[self.path])

    def shutdown(self, tracker: Tracker) -> None:
        self.flush()


class FlakyProcessor(JsonlProcessor):
    """`jsonl`, except that the batch holding log `fail_id` fails `fail_times` times first."""

    def __init__(self, factory: FlakyFactory, shard: int) -> None:
        super().__init__(factory.directory, shard)
        self.factory = factory

    def process(self, batch: Batch, tracker: Tracker) -> None:
        if any(r.get("id") == self.factory.fail_id for r in batch.logs()):
            f = self.factory
            with f.lock:
                f.attempts += 1
                attempt = f.attempts
                note = {
                    "attempt": attempt,
                    "time": time.time(),
                    "shard": batch.shard,
                    "cursor": batch.cursor,
                    "next_cursor": batch.next_cursor,
                }
                with open(f.attempts_path, "a") as out:
                    out.write(json.dumps(note) + "\n")
            if attempt <= f.fail_times:
                raise RuntimeError(f"flaky: attempt {attempt} at {f.fail_id} fails on purpose")
        super().process(batch, tracker)


class FlakyFactory:
    def __init__(self, options: Mapping[str, Any]) -> None:
        self.directory = Path(options["path"])
        self.fail_id = str(options["fail_id"])
        self.fail_times = int(options["fail_times"])
        self.attempts_path = Path(options["attempts"])
        self.attempts = 0
        self.lock = threading.Lock()

    def __call__(self, shard: int) -> FlakyProcessor:
        return FlakyProcessor(self, shard)


class RecordFactory:
    """Options besides `path`: `start_held` (a file `start()` creates before it waits for
    ever: the daemon never gets past its start), `closed` (a file `close()` creates), and
    `built` with `build_seconds` (a file the constructor creates, then how long it takes: a
    slow start, before the daemon listens for signals), and `start_fails` (`start()` raises:
    `value` a ValueError, `sink` SinkUnreachable, `bug` a RuntimeError)."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        if options.get("built"):
            Path(options["built"]).touch()
            time.sleep(float(options.get("build_seconds", 0)))
        self.path = str(options["path"])
        self.start_held = options.get("start_held")
        self.closed = options.get("closed")
        self.start_fails = options.get("start_fails")

    async def start(self) -> None:
        if self.start_fails == "value":
            raise ValueError("processor.record.start_fails: refused, as asked")
        if self.start_fails == "sink":
            raise SinkUnreachable("the sink at sink.test:9 refused the connection")
        if self.start_fails == "bug":
            raise RuntimeError("a bug in start()")
        if self.start_held:
            await anyio.Path(self.start_held).touch()
            await anyio.sleep_forever()

    def close(self) -> None:
        if self.closed:
            Path(self.closed).touch()

    def __call__(self, shard: int) -> RecordProcessor:
        return RecordProcessor(self.path)


class StuckProcessor:
    """Writes `{"id"}` lines to `<path>/shard-<n>.jsonl` (as `jsonl` does), except that the
    shard `stuck_shard` gets stuck in its batch number `after + 1`: it creates
    `<path>/stuck-<n>` and never returns. `SyncStuck` blocks its worker thread for ever;
    `AsyncStuck` awaits for ever, shielded from cancellation."""

    def __init__(self, options: Mapping[str, Any], shard: int) -> None:
        self.dir = Path(options["path"])
        self.shard = shard
        self.stuck_shard = int(options["stuck_shard"])
        self.after = int(options["after"])
        self.options_block_s = float(options.get("block_s", 0))
        self.batches = 0
        self.fd = -1

    def initialize(self, shard: int) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
        self.fd = os.open(self.dir / f"shard-{shard}.jsonl", flags, 0o644)

    def _gets_stuck(self) -> bool:
        self.batches += 1
        if self.shard == self.stuck_shard and self.batches > self.after:
            (self.dir / f"stuck-{self.shard}").touch()
            return True
        return False

    def _write(self, batch: Batch, tracker: Tracker) -> None:
        lines = "".join(json.dumps({"id": r.get("id")}) + "\n" for r in batch.logs())
        os.write(self.fd, lines.encode())
        tracker.save_checkpoint(persist=False)

    def flush(self) -> None:
        os.fsync(self.fd)

    def shutdown(self, tracker: Tracker) -> None:
        self.flush()


class SyncStuck(StuckProcessor):
    def process(self, batch: Batch, tracker: Tracker) -> None:
        if self._gets_stuck():
            threading.Event().wait()
        self._write(batch, tracker)


class AsyncStuck(StuckProcessor):
    async def process(self, batch: Batch, tracker: Tracker) -> None:
        if self._gets_stuck():
            with anyio.CancelScope(shield=True):
                await anyio.sleep_forever()
        self._write(batch, tracker)


class BlockingLoop(StuckProcessor):
    """An `async def process` that blocks the event loop with `time.sleep` for `block_s` in
    the batch it gets stuck in (a plugin bug the daemon must name), then goes on."""

    async def process(self, batch: Batch, tracker: Tracker) -> None:
        if self._gets_stuck() and not (self.dir / f"blocked-{self.shard}").exists():
            (self.dir / f"blocked-{self.shard}").touch()  # once per daemon, not per batch
            time.sleep(float(self.options_block_s))  # noqa: ASYNC251 (the bug under test)
        self._write(batch, tracker)


class StuckFactory:
    def __init__(self, options: Mapping[str, Any]) -> None:
        self.options = dict(options)
        kinds = {"sync": SyncStuck, "async": AsyncStuck, "blocking": BlockingLoop}
        self.kind = kinds[str(options["kind"])]

    def __call__(self, shard: int) -> StuckProcessor:
        return self.kind(self.options, shard)


class HeldProcessor(JsonlProcessor):
    """`jsonl`, except that the shard's first batch is held: its ack deferred, nothing written
    (as a processor that buffers for a later write). `redelivery()` (with `ask`) then asks for
    it again, once, noting the request in `asked`; the batch is written when it comes back."""

    def __init__(self, factory: HeldFactory, shard: int) -> None:
        super().__init__(factory.directory, shard)
        self.factory = factory
        self.held: str | None = None  # the cursor of the held batch
        self.asked = False
        self.first = True
        self.fail_asks = factory.fail_asks
        self.lock = threading.Lock()

    def process(self, batch: Batch, tracker: Tracker) -> None:
        with self.lock:
            if self.first:
                self.first, self.held = False, batch.cursor
                tracker.defer()  # never done: only a re-delivery moves the checkpoint past it
                return
            if batch.cursor == self.held:
                self.held = None
        super().process(batch, tracker)

    def redelivery(self) -> str | None:
        with self.lock:
            if self.fail_asks > 0:  # wrong answers: an exception, then a number
                self.fail_asks -= 1
                if self.fail_asks % 2:
                    raise RuntimeError("held: redelivery() fails on purpose")
                return 42  # type: ignore[return-value]
            if not self.factory.ask or self.held is None or self.asked:
                return None
            self.asked = True
            with open(self.factory.asked_path, "a") as out:
                out.write(json.dumps({"shard": self.shard, "cursor": self.held}) + "\n")
            return self.held


class HeldFactory:
    def __init__(self, options: Mapping[str, Any]) -> None:
        self.directory = Path(options["path"])
        self.ask = bool(options["ask"])
        self.asked_path = Path(options["asked"])
        self.fail_asks = int(options.get("fail_asks", 0))

    def __call__(self, shard: int) -> HeldProcessor:
        return HeldProcessor(self, shard)


TEST_PROCESSORS = ("record", "flaky", "stuck", "held")


@hookimpl
def loghubd_register_processors() -> Iterable[ProcessorSpec]:
    return [
        ProcessorSpec("record", RecordFactory, "tests: delivery order in one file"),
        ProcessorSpec("flaky", FlakyFactory, "tests: jsonl failing at one batch"),
        ProcessorSpec("stuck", StuckFactory, "tests: one shard's process() never returns"),
        ProcessorSpec("held", HeldFactory, "tests: a held batch asked for by redelivery()"),
    ]
