"""A watch on the event loop, from a thread.

Everything the daemon does on time (heartbeats, commits, the ops port, WATCHDOG=1) runs on one
event loop. A call that holds the loop (an `async def process` that calls `time.sleep` or a
blocking client) stops all of it at once: the lease lapses, the shards are handed on and read
twice, `/healthz` does not answer, and no line says why. This thread notices when the loop
has missed its beat (every `TICK_S`) by `BLOCKED_S`, 3 s in all, and logs
`event_loop_blocked` with where the loop's thread is (the innermost frames of its stack,
usually the plugin's own line), then `event_loop_unblocked` with how long it lasted. Only a
log line: it cannot unblock anything.
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
from pathlib import Path
from types import FrameType

import anyio
import structlog

log = structlog.get_logger("loghubd.loop")

BLOCKED_S = 2.0  # silent this long past its beat is reported (a GC pause or an import is shorter)
RECENT_S = 60.0  # how long /readyz names a block that has ended
TICK_S = 1.0  # a beat and a look a second: 0.05-0.08 % of a core (bench/README)
HINT = (
    "a coroutine is blocking the event loop: heartbeats, commits and the ops port wait for it. "
    "Make a blocking processor method a plain def (it then runs in a worker thread), or await "
    "anyio.to_thread.run_sync(...) around the blocking call"
)


def where(frame: FrameType | None, depth: int = 3) -> str:
    """The innermost `depth` frames of a stack, innermost first, as `dir/file.py:line in
    function`, joined by ` < `: enough to find the plugin's line."""
    if frame is None:
        return "unknown"
    frames = traceback.extract_stack(frame)[-depth:]
    parts = [
        f"{Path(f.filename).parent.name}/{Path(f.filename).name}:{f.lineno} in {f.name}"
        for f in reversed(frames)
    ]
    return " < ".join(parts)


class LoopWatch:
    """`await run()` on the loop to watch; it returns only when cancelled."""

    def __init__(self, blocked_s: float = BLOCKED_S, tick_s: float = TICK_S) -> None:
        self.blocked_s = blocked_s
        self.tick_s = tick_s
        self._beat = time.monotonic()
        self._stop = threading.Event()
        self._last: tuple[float, float, str] | None = None  # a block's end, length, where

    def recent_block(self, now: float, within: float = RECENT_S) -> str | None:
        """`/readyz`'s reason for a block that ended less than `within` seconds ago (`now`:
        time.monotonic()), or None. While the loop is blocked, nothing answers at all; once it
        runs again, the heartbeat and lease reasons it caused read like a service outage, so
        the cause is named beside them."""
        last = self._last
        if last is None or now - last[0] > within:
            return None
        ended, lasted, spot = last
        return (
            f"the event loop was blocked for {lasted:.1f}s, {now - ended:.0f}s ago, at {spot} "
            "(a coroutine that blocks it: see event_loop_blocked in the log)"
        )

    async def run(self) -> None:
        loop_thread = threading.get_ident()
        thread = threading.Thread(
            target=self._watch, args=(loop_thread,), name="loghubd-loopwatch", daemon=True
        )
        thread.start()
        try:
            while True:
                self._beat = time.monotonic()
                await anyio.sleep(self.tick_s)
        finally:
            self._stop.set()

    def _watch(self, loop_thread: int) -> None:
        since: float | None = None  # when the reported block began
        spot = ""
        while not self._stop.wait(self.tick_s):
            beat = self._beat
            silent = time.monotonic() - beat
            if silent < self.blocked_s + self.tick_s:
                if since is not None:
                    self._last = (beat, beat - since, spot)
                    log.warning(
                        "event_loop_unblocked", blocked_s=round(beat - since, 1), where=spot
                    )
                    since = None
                continue
            if since is None:
                since = beat
                spot = where(sys._current_frames().get(loop_thread))
                log.warning("event_loop_blocked", blocked_s=round(silent, 1), where=spot, hint=HINT)
