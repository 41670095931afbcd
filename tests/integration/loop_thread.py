"""An asyncio event loop in a thread of the test process, for the stand-in servers the tests
run beside real daemons (the HTTP receiver, the CONNECT proxy): started with a coroutine
that brings the server up, stopped with one that takes it down."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable


class LoopThread:
    def __init__(self, what: str) -> None:
        self.what = what
        self.loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None

    def start(self, up: Callable[[], Awaitable[None]], timeout: float = 10.0) -> None:
        """Run `up()` on the loop, then keep the loop running; RuntimeError if `up` does not
        finish within `timeout` (its exception, if it raised)."""
        ready = threading.Event()
        failure: list[BaseException] = []

        async def first() -> None:
            try:
                await up()
            except BaseException as exc:
                failure.append(exc)
                raise
            finally:
                ready.set()

        def run() -> None:
            try:
                self.loop.run_until_complete(first())
            except BaseException:
                return
            self.loop.run_forever()

        self._thread = threading.Thread(target=run, daemon=True, name=self.what)
        self._thread.start()
        if not ready.wait(timeout) or failure:
            raise RuntimeError(f"{self.what} did not start: {failure[:1]}")

    def stop(self, down: Callable[[], Awaitable[None]], timeout: float = 10.0) -> None:
        """Run `down()` on the loop, then stop and close it."""
        asyncio.run_coroutine_threadsafe(down(), self.loop).result(timeout)
        self.loop.call_soon_threadsafe(self.loop.stop)
        if self._thread is not None:
            self._thread.join(timeout)
        self.loop.close()
