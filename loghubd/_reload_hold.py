"""A SIGHUP that reaches `loghubd run` before the daemon listens for it is remembered, not
obeyed: its default action would end the process (exit 129) while it is still importing, and
ignoring it would drop a reload asked for after the file was read. `loghubd.shutdown.Trigger`
takes it (`take`) as soon as it listens, and reloads then.

Imported by the console script before anything else of loghubd (`loghubd._entry`), so it
imports nothing but `signal`: the window in which a SIGHUP still ends the process is the
interpreter's own start-up."""

from __future__ import annotations

import signal
from types import FrameType

RELOAD = signal.SIGHUP
_pending = False


def _remember(_signum: int, _frame: FrameType | None) -> None:
    global _pending
    _pending = True


def hold() -> None:
    """Remember SIGHUPs from now on (a second call keeps one already remembered). Leaves the
    signal mask alone: one blocked across a reload's exec stays pending until the daemon
    unblocks it (`loghubd.shutdown.hold_reloads`)."""
    global _pending
    if signal.getsignal(RELOAD) is not _remember:
        _pending = False
        signal.signal(RELOAD, _remember)


def take() -> bool:
    """Whether a SIGHUP arrived since `hold` (once)."""
    global _pending
    pending, _pending = _pending, False
    return pending
