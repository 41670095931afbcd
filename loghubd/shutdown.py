"""The process-level edge of `loghubd run`'s bounded shutdown: signals, and ending on purpose.

The shutdown itself is structured (`loghubd.app`, `loghubd.consumer.supervisor`): in-flight
batches get `shutdown_grace`, then are cancelled, and what finished is committed. Processor
code can still keep the *process* alive after that:

- a synchronous `process()` blocked for ever runs in an AnyIO worker thread, which the
  cancellation abandons; that thread is not a daemon thread, so `threading`'s exit-time join
  of non-daemon threads (`threading._shutdown`) would wait for it for ever;
- an asynchronous `process()` that never returns even when cancelled (it shields itself, or
  swallows the cancellation) keeps its task group, and so `anyio.run`, open.

Both are ended here deliberately, and only on that path: the reason is logged, the log
streams are flushed, and `os._exit` skips the join. Besides, once the first SIGTERM/SIGINT
has started the graceful shutdown, a second one ends the process at once (exit 1).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from types import FrameType
from typing import Any, NoReturn

import anyio
import structlog

log = structlog.get_logger("loghubd.shutdown")

SIGNALS = (signal.SIGTERM, signal.SIGINT)


def exit_now(code: int, event: str, **fields: Any) -> NoReturn:
    """Log `event`, flush the log streams and end the process with `code`, without waiting for
    any thread (see the module doc: only for processor code that never returns)."""
    # A signal may arrive while the stream is being written (a reentrant write raises), and
    # a closed or broken stream must not keep us alive either.
    with contextlib.suppress(Exception):
        log.error(event, exit_code=code, **fields)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _on_second_signal(signum: int, _frame: FrameType | None) -> None:
    exit_now(1, "second_signal_exiting_now", signal=signal.Signals(signum).name)


async def first_signal() -> None:
    """The production shutdown trigger of `loghubd run`: return at the first SIGTERM or
    SIGINT, after arranging that a second one ends the process at once.

    The second signal is handled by a plain `signal.signal` handler, not by the event loop:
    it then works even while the loop itself is blocked by processor code."""
    with anyio.open_signal_receiver(*SIGNALS) as signals:
        async for _ in signals:
            break
    for signum in SIGNALS:
        signal.signal(signum, _on_second_signal)
