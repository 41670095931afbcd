"""`loghubd run --workers N`: N consumer processes of one group on this host.

Each child is `loghubd run` with the same arguments, a suffixed consumer name (`<name>-<i>`)
and its own ops listener (`ops.listen` port + i, so /metrics of each is scraped separately).
A child that dies is restarted (with a short backoff so a crash loop does not spin);
SIGTERM/SIGINT are forwarded to every child and we wait for them to finish their graceful
shutdown. The exit code is the worst of the children's. SIGHUP is forwarded too: each child
reloads the configuration file itself (`loghubd.shutdown`, same PID); what this process
derived from it at start (the worker count, each child's ops port) needs a restart.

Under systemd (`$NOTIFY_SOCKET` set; the unit has `NotifyAccess=main`, so only we may speak)
each child sends its sd_notify messages to a socket of ours instead, and `loghubd.ops.relay`
decides what systemd hears: READY=1 once every child is ready, WATCHDOG=1 from this loop,
STATUS= with how many workers are ready, STOPPING=1 when a signal arrives. A child whose own
watchdog pings stop for a whole `WatchdogSec` is killed and restarted alone.
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
from loghubd.ops.relay import Relay
from loghubd.ops.systemd import SystemdNotifier
from loghubd.shutdown import reloads_blocked

log = structlog.get_logger("loghubd.workers")

# `loghubd run`'s exit codes that a restart cannot help: a configuration it (or the service)
# refuses, and a project, logstore or group that does not exist.
PERMANENT = (2, 3)


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


def _child_env(cfg: Config, index: int, notify_socket: str | None) -> dict[str, str]:
    port = cfg.ops.port
    listen = f"{cfg.ops.listen.rpartition(':')[0]}:{port + index if port else 0}"
    env = {**os.environ, "LOGHUBD_OPS__LISTEN": listen}
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
    if notify.address is None:
        return _supervise(count, argv, cfg, notify, None)
    with tempfile.TemporaryDirectory(prefix="loghubd-notify-") as directory:
        listeners = _Listeners(directory, count)
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

    def spawn(index: int) -> subprocess.Popen[bytes]:
        sock = None if listeners is None else listeners.paths[index]
        with reloads_blocked():  # a SIGHUP forwarded while it starts waits for it
            child = subprocess.Popen(
                _child_argv(argv, names[index]), env=_child_env(cfg, index, sock)
            )
        relay.started(names[index], time.monotonic())
        return child

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

    def reload(_signum: int, _frame: FrameType | None) -> None:
        if stopping:
            return
        with contextlib.suppress(Exception):  # a signal handler: a reentrant write raises
            log.info("workers_reload", pids=[c.pid for c in children.values() if c.poll() is None])
        for child in children.values():
            if child.poll() is None:
                child.send_signal(signal.SIGHUP)  # each checks the file and replaces itself

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGHUP, reload)
    for index, name in enumerate(names):
        children[name] = spawn(index)
        log.info("worker_started", name=name, pid=children[name].pid)
    worst = 0
    while True:
        if listeners is not None:
            now = time.monotonic()
            for index, message in listeners.drain():
                relay.heard(names[index], message, now)
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
                continue
            if name in due:  # dead, and restarted when its back-off is over
                if time.monotonic() >= due[name]:
                    del due[name]
                    restarts[name] = time.monotonic()
                    children[name] = spawn(names.index(name))
                    log.info("worker_restarted", name=name, pid=children[name].pid)
                    alive = True
                continue
            if code in PERMANENT:
                # The child refused its configuration (e.g. a processor's options), or what it
                # consumes does not exist: restarting cannot help. Stop the others, and exit
                # with its code so systemd does not restart us either
                # (RestartPreventExitStatus=2 3).
                log.error("worker_refused_config", name=name, exit_code=code)
                forward(signal.SIGTERM, None)
                worst = code
                continue
            # The back-off is waited out by this loop, not in a sleep: the others' watchdog
            # pings, readiness and deaths are still seen meanwhile, and a stop in between
            # cancels the restart (a worker started after it would not get the signal).
            wait = 1.0 if time.monotonic() - restarts.get(name, 0) > 30 else 5.0
            log.warning("worker_died", name=name, exit_code=code, restart_in_s=wait)
            due[name] = time.monotonic() + wait
        if stopping and not alive:
            return worst
        time.sleep(0.2)
