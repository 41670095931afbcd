"""Writing test logs from the test process: what `loghubd produce` writes (loghubd/produce.py:
ids `<prefix><n>`, keyed logs with `key` and `seq`), over HTTP to a real server, in a thread
with its own event loop.

A `loghubd produce` subprocess spends ~0.4-0.7 CPU-seconds starting Python and importing
before its first PutLogs, more than writing a few thousand logs costs; a suite that starts
150 of them pays for that in minutes. The command itself keeps its own tests.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import anyio

from loghubd.produce import ProduceOptions, summarize, write_logs


class _Stopped(Exception):
    """Raised from the progress callback to end the writing early (`stop`)."""


class BackgroundProducer:
    """`start()` writes `count` logs in a daemon thread; `wait()` returns the summary the
    command prints (`written`, `first_id`, `last_id`, `seconds`) or raises AssertionError
    with the writer's error; `stop()` ends it early, as killing the command would."""

    def __init__(
        self, endpoint: str, project: str, logstore: str, count: int, **options: Any
    ) -> None:
        self.options = ProduceOptions(endpoint, project, logstore, count, **options)
        self.written = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._seconds = 0.0

    def start(self) -> BackgroundProducer:
        assert self._thread is None, "already started"
        self._thread = threading.Thread(
            target=self._run, name=f"producer-{self.options.logstore}", daemon=True
        )
        self._thread.start()
        return self

    def _count(self, written: int) -> None:
        self.written = written
        if self._stop.is_set():
            raise _Stopped

    def _run(self) -> None:
        started = time.monotonic()
        try:
            anyio.run(write_logs, self.options, self._count)
        except _Stopped:
            pass
        except BaseException as exc:  # reported by wait(), in the test's thread
            self.error = exc
        self._seconds = time.monotonic() - started

    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def wait(self, timeout: float = 60.0) -> dict[str, Any]:
        assert self._thread is not None, "not started"
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise AssertionError(
                f"producer still writing after {timeout:.0f}s: "
                f"{self.written} of {self.options.count} logs"
            )
        if self.error is not None:
            raise AssertionError(
                f"producer failed after {self.written} logs: {self.error!r}"
            ) from self.error
        interrupted = self._stop.is_set() and self.written < self.options.count
        return dict(summarize(self.options, self.written, self._seconds, interrupted=interrupted))

    def stop(self, timeout: float = 30.0) -> None:
        """End the writing after the PutLogs under way (a no-op once it is done)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)


def produce_logs(
    endpoint: str, project: str, logstore: str, count: int, **options: Any
) -> dict[str, Any]:
    """Write `count` logs and return the summary (AssertionError if fewer were written)."""
    summary = BackgroundProducer(endpoint, project, logstore, count, **options).start().wait()
    assert summary["written"] == count, summary
    return summary
