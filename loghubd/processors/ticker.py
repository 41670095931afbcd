"""A file sink's clock: a thread that calls a function every few tenths of a second, for what
must happen when no batch comes (`parquet` writing a buffer that reached `max_age_s`, `jsonl`
closing a quiet shard's file after `rotate_seconds`). A thread, not a task of the event
loop: what it calls writes and fsyncs files, and takes the same locks as `process()`, which
the daemon runs in worker threads.

The thread runs in the logging context of the one that started it (the source's `source=`
binding, as the event loop's own lines have). An exception from the function is the
function's to handle: one that escapes is logged and the clock goes on."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

import structlog

from loghubd.errors import describe_error

log = structlog.get_logger("loghubd.processors.ticker")

T = TypeVar("T")


class Ticker:
    def __init__(self, name: str, interval: float, tick: Callable[[], None]) -> None:
        self.name = name
        self.interval = interval
        self._tick = tick
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(
            target=contextvars.copy_context().run, args=(self._run,), name=self.name, daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop, waiting up to `timeout` seconds for a tick in progress to end."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._tick()
            except Exception as exc:
                log.warning("ticker_failed", ticker=self.name, error=describe_error(exc))


class Members(Generic[T]):
    """What a clock looks after (a factory's open shards): added when a shard starts, removed
    at its shutdown, read as a list by each tick. Thread-safe."""

    def __init__(self) -> None:
        self._items: set[T] = set()
        self._lock = threading.Lock()

    def add(self, item: T) -> None:
        with self._lock:
            self._items.add(item)

    def discard(self, item: T) -> None:
        with self._lock:
            self._items.discard(item)

    def now(self) -> list[T]:
        with self._lock:
            return list(self._items)
