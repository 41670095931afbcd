"""`loghubd run --workers N`: N consumer processes of one group on this host.

Each child is `loghubd run` with the same arguments, a suffixed consumer name (`<name>-<i>`)
and its own ops listener (`ops.listen` port + i, so /metrics of each is scraped separately).
A child that dies is restarted (with a short backoff so a crash loop does not spin), unless
it could not start at all (`START_FAILURES`: its configuration refused, what it consumes
missing, its ops port taken) before it was ever ready: a restart cannot cure that, so the
others are stopped and we exit with its code. SIGTERM/SIGINT are forwarded to every child and
we wait for them to finish their graceful shutdown. The exit code is the worst of the
children's. SIGHUP is forwarded too: each child reloads the configuration file itself
(`loghubd.shutdown`, same PID); what this process derived from it at start (the worker count,
each child's ops port) needs a restart.

Each child sends its sd_notify messages to a socket of ours (`$NOTIFY_SOCKET` in its
environment), with or without systemd: its READY=1 is how we know it started. Under systemd
(`$NOTIFY_SOCKET` set for us; the unit has `NotifyAccess=main`, so only we may speak)
`loghubd.ops.relay` decides what systemd hears: READY=1 once every child is ready, WATCHDOG=1
from this loop, STATUS= with how many workers are ready, STOPPING=1 when a signal arrives. A
child whose own watchdog pings stop for a whole `WatchdogSec` is killed and restarted alone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from types import FrameType

import structlog

from loghubd.app import default_consumer_name
from loghubd.config import Config
from loghubd.errors import describe_error
from loghubd.ops.relay import Relay
from loghubd.ops.systemd import SystemdNotifier
from loghubd.shutdown import reloads_blocked

log = structlog.get_logger("loghubd.workers")

# `loghubd run`'s exit codes that mean "cannot start: configuration or environment"
# (`loghubd.admin.errors`' table; `loghubd.commands._run`, `_run_daemon`), and what each means
# here. `run` exits with them only when it cannot start: it retries a service it cannot reach
# instead of exiting 4, so 4 is a local listener or a sink down at start (systemd restarts
# the unit after 4: the wait is visible there, not hidden in a loop of ours). Restarting the
# same command line on the same host at once cannot help; 1 (e.g. refused credentials, which
# can be rotated) and deaths by a signal are restarted.
START_FAILURES = {
    2: "its configuration is refused (by loghubd, a processor, or the service)",
    3: "the project, logstore or consumer group does not exist",
    4: "its ops.listen cannot be listened on (the port is taken by another process, or the "
    "address is not one of this host), or its sink cannot be reached at start (the worker's "
    "line on stderr says which)",
}


def _child_argv(argv: list[str], name: str) -> list[str]:
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in ("--workers", "--name"):
            skip = True
            continue
        if arg.startswith(("--workers=", "--name=")):
            continue
        out.append(arg)
    return [sys.executable, "-m", "loghubd", *out, "--name", name]


def _child_listen(cfg: Config, index: int) -> str:
    """The `ops.listen` of child `index`: the configured port + index (0 stays 0)."""
    port = cfg.ops.port
    return f"{cfg.ops.listen.rpartition(':')[0]}:{port + index if port else 0}"


def _child_env(cfg: Config, index: int, notify_socket: str | None) -> dict[str, str]:
    env = {**os.environ, "LOGHUBD_OPS__LISTEN": _child_listen(cfg, index)}
    env.pop("WATCHDOG_PID", None)  # systemd's names us; the child pings us, not systemd
    if notify_socket is not None:
        env["NOTIFY_SOCKET"] = notify_socket
    return env


class _Listeners:
    """One datagram socket per child (`<dir>/<index>.sock`), read without blocking."""

    def __init__(self, directory: str, count: int) -> None:
        self.paths = [os.path.join(directory, f"{i}.sock") for i in range(count)]
        self.sockets: list[socket.socket] = []
        for path in self.paths:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sock.bind(path)
            sock.setblocking(False)
            self.sockets.append(sock)

    def drain(self) -> list[tuple[int, str]]:
        got = []
        for index, sock in enumerate(self.sockets):
            while True:
                try:
                    got.append((index, sock.recv(4096).decode(errors="replace")))
                except BlockingIOError:
                    break
        return got

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()


def run_workers(count: int, argv: list[str], cfg: Config) -> int:
    notify = SystemdNotifier.from_env()
    # The children's sockets are made with or without systemd: their READY=1 tells a worker
    # that ran from one that never could (`_supervise`).
    try:
        directory = tempfile.TemporaryDirectory(prefix="loghubd-notify-")
    except OSError as exc:  # no writable temporary directory (a read-only root, no $TMPDIR)
        if notify.address is not None:
            raise  # systemd needs the relay: the error is reported as any other
        log.warning(
            "workers_readiness_unknown",
            reason=f"no socket for the workers' READY=1: {exc}",
            consequence="a worker exiting with a start-up failure code is taken for one that "
            "never started, even after it ran",
        )
        return _supervise(count, argv, cfg, notify, None)
    with directory:
        listeners = _Listeners(directory.name, count)
        try:
            return _supervise(count, argv, cfg, notify, listeners)
        finally:
            listeners.close()


def _supervise(
    count: int,
    argv: list[str],
    cfg: Config,
    notify: SystemdNotifier,
    listeners: _Listeners | None,
) -> int:
    base = cfg.consumer.name or default_consumer_name()
    names = [f"{base}-{i}" for i in range(count)]
    pet_every = SystemdNotifier.watchdog_interval()  # half of WatchdogSec
    relay = Relay(names, watchdog_s=2 * pet_every)
    last_pet = 0.0
    said_ready = -1
    # Workers whose current process said READY=1 at least once: it had listened on its ops
    # port, its sources had started and it had joined its group, i.e. it got past everything
    # a start-up failure code stands for. Of all we can know here this is the robust signal
    # that a worker "had been running": it comes from the worker itself, after its start-up,
    # whatever that took (a time alive would take a slow start for a crash, or a worker
    # retrying an unreachable service for minutes for a running one). Unlike the relay's
    # `ready` it stays set across a reload (RELOADING=1): a worker that ran and then cannot
    # start again in place (its reload and rollback both failed) is restarted once, and only
    # if that fresh process cannot start either do we give up.
    ran: set[str] = set()

    def spawn(index: int) -> subprocess.Popen[bytes]:
        sock = None if listeners is None else listeners.paths[index]
        with reloads_blocked():  # a SIGHUP forwarded while it starts waits for it
            child = subprocess.Popen(
                _child_argv(argv, names[index]), env=_child_env(cfg, index, sock)
            )
        relay.started(names[index], time.monotonic())
        ran.discard(names[index])
        return child

    def hear(now: float) -> None:
        if listeners is None:
            return
        for index, message in listeners.drain():
            relay.heard(names[index], message, now)
            if "READY=1" in message.splitlines():
                ran.add(names[index])

    children: dict[str, subprocess.Popen[bytes]] = {}
    restarts: dict[str, float] = {}
    due: dict[str, float] = {}  # a dead worker's name → when it is started again
    stopping = False

    def forward(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        if not stopping:
            notify.send("STOPPING=1")
        stopping = True
        for child in children.values():
            if child.poll() is None:
                child.send_signal(signum)

    reloads: list[list[int]] = []  # the workers each SIGHUP went to, logged by the loop

    def reload(_signum: int, _frame: FrameType | None) -> None:
        if stopping:
            return
        pids = []
        for child in children.values():
            if child.poll() is None:
                child.send_signal(signal.SIGHUP)  # each checks the file and replaces itself
                pids.append(child.pid)
        # Not logged here: this handler may interrupt the loop inside a log call, which
        # holds structlog's (not reentrant) write lock: logging would wait for it for ever.
        reloads.append(pids)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGHUP, reload)
    for index, name in enumerate(names):
        children[name] = spawn(index)
        log.info("worker_started", name=name, pid=children[name].pid)
    worst = 0
    # Every source reads a window (consumer.end): a worker's exit 0 is its end, not a crash.
    bounded = all(spec.consumer.end is not None for spec in cfg.sources)
    while True:
        while reloads:
            log.info("workers_reload", pids=reloads.pop(0))
        if listeners is not None:
            now = time.monotonic()
            hear(now)
            if relay.ready_count() != said_ready:
                said_ready = relay.ready_count()
                notify.send(f"STATUS={said_ready}/{count} workers ready")
            if relay.take_ready():
                notify.send("READY=1")
                log.info("workers_ready", count=count)
            if pet_every and now - last_pet >= pet_every:
                notify.send("WATCHDOG=1")
                last_pet = now
            for name in [] if stopping else relay.stuck(now):
                log.error("worker_watchdog_timeout", name=name, pid=children[name].pid)
                with contextlib.suppress(ProcessLookupError):
                    children[name].kill()  # restarted below, like any dead worker
                relay.started(name, now)
        alive = False
        for name, child in list(children.items()):
            code = child.poll()
            if code is None:
                alive = True
                continue
            if stopping:
                if due.pop(name, None) is None:  # not one that was waiting for its restart
                    worst = max(worst, code)
                    if code > 0:  # our exit code then says so: name the worker it comes from
                        log.warning("worker_stopped", name=name, pid=child.pid, exit_code=code)
                    elif code < 0:  # a signal: before its handlers, or as it exited (a second
                        # SIGTERM, systemd's besides ours); our exit code does not change
                        log.info("worker_stopped", name=name, pid=child.pid, exit_code=code)
                continue
            if name in due:  # dead, and restarted when its back-off is over
                if time.monotonic() >= due[name]:
                    del due[name]
                    restarts[name] = time.monotonic()
                    try:
                        children[name] = spawn(names.index(name))
                    except OSError as exc:  # the interpreter replaced or gone, no fork left
                        log.error(
                            "worker_restart_failed",
                            name=name,
                            error=describe_error(exc),
                            action="stopping the other workers",
                        )
                        del children[name]
                        forward(signal.SIGTERM, None)
                        worst = max(worst, 1)
                        continue
                    log.info("worker_restarted", name=name, pid=children[name].pid)
                    alive = True
                continue
            if code == 0 and bounded:
                # A bounded run (consumer.end): the worker read its window to the end.
                log.info("worker_finished", name=name, pid=child.pid)
                del children[name]
                continue
            hear(time.monotonic())  # a READY=1 it sent just before it exited is queued by now
            reason = START_FAILURES.get(code)
            if reason is not None and name not in ran:
                when = "" if listeners is None else " before it was ready"
                # It could not start (its stderr says why): restarting the same command line
                # cannot cure that, and a loop of them would hide it. Stop the others as on
                # our own SIGTERM, and exit with its code, for systemd (2 and 3 are in
                # RestartPreventExitStatus; 4 restarts the unit after RestartSec) or a
                # container runtime to show. At the first such exit: the codes say a retry is
                # useless, and a transient cause (a port briefly taken) is retried at that
                # level, where it is seen, not hidden in a loop of ours.
                log.error(
                    "worker_cannot_start",
                    name=name,
                    pid=child.pid,
                    exit_code=code,
                    reason=f"worker {name} exited {code}{when}: {reason}",
                    ops_listen=_child_listen(cfg, names.index(name)),
                    action="stopping the other workers; not restarting it",
                )
                del children[name]  # reported here, not again among the stopped ones
                forward(signal.SIGTERM, None)
                worst = max(worst, code)
                continue
            if bounded and code > 0:
                # A bounded run's worker that ran and exited with an error (a shard failed
                # for good: `window_cannot_complete`) would not read its window by starting
                # again: restarted, it fails the same way, for ever, and the cron job that
                # started the run never ends (backfill audit). Its code is the run's; the
                # others read on (its shards go to them) and end as they end. A worker
                # killed by a signal (< 0) is still restarted: it picks up where it was.
                log.error(
                    "worker_failed",
                    name=name,
                    pid=child.pid,
                    exit_code=code,
                    action="not restarting it (a bounded run); the others go on",
                )
                del children[name]
                worst = max(worst, code)
                continue
            # The back-off is waited out by this loop, not in a sleep: the others' watchdog
            # pings, readiness and deaths are still seen meanwhile, and a stop in between
            # cancels the restart (a worker started after it would not get the signal).
            wait = 1.0 if time.monotonic() - restarts.get(name, 0) > 30 else 5.0
            log.warning("worker_died", name=name, exit_code=code, restart_in_s=wait)
            due[name] = time.monotonic() + wait
        if (stopping or not children) and not alive:
            return worst
        time.sleep(0.2)
