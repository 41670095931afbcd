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

SIGHUP reloads the configuration (`Trigger`): the file is checked first, by `loghubd
check-config` in a child process (exactly the operator's check, processors built as at start);
a configuration it refuses is logged (`reload_refused`, naming the key) and the daemon runs on
as it was. One it accepts starts the same graceful shutdown as SIGTERM (every finished batch
committed, the shards let go), and the process then replaces itself with a fresh `loghubd run`
of the same command line (`reexec`): same PID, so systemd (`systemctl reload`, `ExecReload`),
a container runtime or `--workers`' supervisor keep following it. Nothing is delivered twice.
If the fresh image cannot start with the new file, it starts again with the text that ran
before (`loghubd.rollback`, `roll_back`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, NoReturn

import anyio
import structlog

from loghubd import _reload_hold, rollback
from loghubd.logging import from_signal_handler
from loghubd.rollback import ReloadState

log = structlog.get_logger("loghubd.shutdown")

SIGNALS = (signal.SIGTERM, signal.SIGINT)


def exit_now(code: int, event: str, **fields: Any) -> NoReturn:
    """Log `event`, flush the log streams and end the process with `code`, without waiting for
    any thread (see the module doc: only for processor code that never returns)."""
    # Called from signal handlers: the line is written past structlog's lock (which the
    # interrupted code may hold), and a closed or broken stream does not keep us alive.
    from_signal_handler("error", event, exit_code=code, **fields)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


# A stop signal this soon after the first is the same request sent twice, not an operator's
# second one: systemd's KillMode=control-group signals every process of the unit, so a
# `--workers` child gets systemd's SIGTERM and its supervisor's forwarded one together.
SAME_STOP_S = 1.0
_first_stop_at: float | None = None  # monotonic, when the stop that began the shutdown came


def _stop_began() -> None:
    global _first_stop_at
    _first_stop_at = time.monotonic()


def _on_second_signal(signum: int, _frame: FrameType | None) -> None:
    name = signal.Signals(signum).name
    if _first_stop_at is not None and time.monotonic() - _first_stop_at < SAME_STOP_S:
        from_signal_handler("info", "stop_signal_repeated", signal=name)
        return
    exit_now(1, "second_signal_exiting_now", signal=name)


# How long the process may take to end once its work is done (joining threads, atexit hooks
# of plugin code: pyspark stops its JVM there) before it is ended anyway.
EXIT_GRACE_S = 15.0


def exiting(code: int) -> None:
    """The process is done and about to exit with `code`: a stop signal now (the late copy of
    one sent twice: systemd's and a `--workers` supervisor's) is ignored, and an exit that
    hangs (a thread that never ends, an atexit hook) ends after `EXIT_GRACE_S` by itself,
    since no signal can interrupt it any more. Python's finalization sets a signal with a
    Python handler back to its default action, which for SIGTERM ends the process (exit 143
    after `shutdown_complete`); it leaves an ignored one ignored. Not before `reexec`: an
    ignored signal stays ignored across an exec."""
    for signum in SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    timer = threading.Timer(
        EXIT_GRACE_S, exit_now, (code, "exit_did_not_finish"), {"waited_s": EXIT_GRACE_S}
    )
    timer.daemon = True
    timer.start()


def stop_signals_after_the_first() -> None:
    """A process whose first SIGTERM/SIGINT began a graceful shutdown: a copy of it within
    `SAME_STOP_S` is only logged (`stop_signal_repeated`), a later one ends the process at
    once (exit 1, `second_signal_exiting_now`), as for `loghubd run`; a SIGHUP is ignored."""
    _stop_began()
    for signum in SIGNALS:
        signal.signal(signum, _on_second_signal)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


def _reload_during_shutdown(_signum: int, _frame: FrameType | None) -> None:
    from_signal_handler("warning", "reload_ignored", reason="the daemon is already shutting down")


RELOAD = _reload_hold.RELOAD
CHECK_TIMEOUT_S = 120.0  # a processor's check may connect to its sink


class Trigger:
    """The shutdown trigger of `loghubd run`: returns at the first SIGTERM or SIGINT, or at a
    SIGHUP whose configuration `loghubd check-config` accepts (`reload` is then True: the
    caller `reexec`s once the graceful shutdown is over). A SIGHUP that came while the daemon
    started (`hold_reloads`) is checked as soon as it listens. Arranges that a second SIGTERM
    or SIGINT then ends the process at once (after a reload, the first one only cancels the
    exec: `reload_cancelled`), and that a SIGHUP is only logged.

    The second signal is handled by a plain `signal.signal` handler, not by the event loop:
    it then works even while the loop itself is blocked by processor code."""

    def __init__(
        self,
        config: str,
        notify: Callable[[str], None],
        checked: Callable[[str | None, float], None],
    ) -> None:
        self.config = config
        self.reload = False
        self._notify = notify  # sd_notify, for a reload that a stop cancels
        self._checked = checked  # each check's outcome (/metrics, /status)
        self._checking = False

    async def __call__(self) -> None:
        with anyio.open_signal_receiver(*SIGNALS, RELOAD) as signals:
            async with anyio.create_task_group() as tg:

                def check(received: str) -> None:
                    if not self._checking:  # one check at a time: it reads the latest file
                        self._checking = True
                        tg.start_soon(self._check_then_reload, tg.cancel_scope, received)

                if _take_pending_reload():  # asked for while the daemon started
                    check("while starting")
                async for signum in signals:
                    if signum != RELOAD:
                        _stop_began()
                        break
                    check("while running")
                tg.cancel_scope.cancel()  # a stop wins over a check still running
        for signum in SIGNALS:
            signal.signal(signum, self._stop_during_reload if self.reload else _on_second_signal)
        signal.signal(RELOAD, _reload_during_shutdown)

    def _stop_during_reload(self, signum: int, _frame: FrameType | None) -> None:
        """A stop during a reload's shutdown: no exec after it (the process exits when it is
        over, as after a SIGTERM); a further one ends the process at once."""
        self.reload = False
        _stop_began()
        for stop in SIGNALS:
            signal.signal(stop, _on_second_signal)
        from_signal_handler("warning", "reload_cancelled", signal=signal.Signals(signum).name)
        with contextlib.suppress(Exception):
            self._notify("STOPPING=1")

    def systemd_state(self, state: str) -> str:
        """What systemd hears for the daemon's `state`: a reload is not a stop; READY=1 from
        the process that replaces this one ends it."""
        if state == "STOPPING=1" and self.reload:
            return f"RELOADING=1\nMONOTONIC_USEC={time.monotonic_ns() // 1000}"
        return state

    async def _check_then_reload(self, scope: anyio.CancelScope, received: str) -> None:
        log.info("reload_requested", config=self.config, received=received)
        try:
            problem = await check_config(self.config)
        finally:
            self._checking = False
        self._checked(problem, time.time())
        if problem is not None:
            log.error(
                "reload_refused",
                config=self.config,
                problem=problem,
                hint="the daemon runs on with the configuration it started with; fix the "
                "file and send SIGHUP again",
            )
            return
        log.info("reload_accepted", config=self.config)
        self.reload = True
        scope.cancel()


async def check_config(path: str) -> str | None:
    """What `loghubd check-config` refuses in `path` (None: accepted), in one line."""
    command = [sys.executable, "-m", "loghubd", "check-config", path]
    with anyio.move_on_after(CHECK_TIMEOUT_S):
        done = await anyio.run_process(command, check=False)
        if done.returncode == 0:
            return None
        lines = [line.strip() for line in done.stderr.decode(errors="replace").splitlines()]
        lines = [line for line in lines if line]
        if len(lines) > 1 and lines[0].endswith(":"):  # "FILE: invalid configuration:"
            return f"{lines[0]} {'; '.join(lines[1:])}"
        return "; ".join(lines) or f"exit {done.returncode}"
    return f"loghubd check-config {path} did not finish in {CHECK_TIMEOUT_S:.0f} s"


def reload_after(code: int, running: str) -> None:
    """The graceful shutdown of an accepted reload is over: `reexec`, handing over `running`
    (the configuration text this process ran: `loghubd.rollback`), unless the shutdown failed
    (`code` not 0; the caller then exits with it, and a supervisor restarts the daemon)."""
    if code == 0:
        reexec(ReloadState(running))
    log.error("reload_abandoned", exit_code=code, reason="the shutdown before it failed")


def roll_back(state: ReloadState, reason: str) -> NoReturn:
    """A reloaded configuration did not start: start again with the one that ran before it
    (`state.previous`), once; that image reports the failed reload."""
    log.error(
        "reload_failed",
        reason=reason,
        action="starting again with the configuration that ran before the reload",
        hint="fix the file and send SIGHUP again",
    )
    reexec(ReloadState(state.previous, failed=reason, failed_at=time.time()))


def reexec(state: ReloadState) -> NoReturn:
    """Replace this process by a fresh one of the same command line (same PID, same
    environment and working directory), handing it `state`. Only after the graceful shutdown
    (or before the daemon started): every file descriptor but the standard streams and the
    state's is closed by the exec (Python opens them non-inheritable), and so is every
    thread."""
    argv = list(sys.orig_argv)
    if not rollback.hand_over(state, os.environ):
        log.warning("reload_without_rollback", reason="this platform has no memfd_create")
    log.info("reloading", argv=argv)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    # Across the exec a handler becomes the default action (ending the new image at once),
    # and an ignored signal would be dropped: a blocked one waits, pending, for the new
    # image's `hold_reloads`.
    signal.pthread_sigmask(signal.SIG_BLOCK, {RELOAD})
    os.execv(sys.executable, argv)


def hold_reloads() -> None:
    """Until `Trigger` listens for SIGHUP (while the daemon starts), remember one instead of
    acting on it (`loghubd._reload_hold`, which the console script set already, before its
    imports). The Trigger reloads as soon as it listens. One sent before this process could
    handle it (across a reload's exec, or to a `--workers` child just started:
    `reloads_blocked`) was held pending by the blocked signal, and arrives here."""
    _reload_hold.hold()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {RELOAD})


@contextlib.contextmanager
def reloads_blocked() -> Iterator[None]:
    """SIGHUP blocked in this thread meanwhile: a child process started inside inherits the
    block (it survives the exec), so a SIGHUP sent to the child before its `hold_reloads`
    waits instead of ending it (the default action). One sent to this process meanwhile is
    delivered after."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {RELOAD})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {RELOAD})


def _take_pending_reload() -> bool:
    """Whether a SIGHUP arrived since `hold_reloads` (once)."""
    return _reload_hold.take()
