"""`loghubd run --workers N`: N consumer processes of one group on this host.

Each child is `loghubd run` with the same arguments, a suffixed consumer name (`<name>-<i>`)
and its own ops listener (`ops.listen` port + i, so /metrics of each is scraped separately).
A child that dies is restarted (with a short backoff so a crash loop does not spin);
SIGTERM/SIGINT are forwarded to every child and we wait for them to finish their graceful
shutdown. The exit code is the worst of the children's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from types import FrameType

import structlog

from loghubd.app import default_consumer_name
from loghubd.config import Config

log = structlog.get_logger("loghubd.workers")


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


def _child_env(cfg: Config, index: int) -> dict[str, str]:
    port = cfg.ops.port
    listen = f"{cfg.ops.listen.rpartition(':')[0]}:{port + index if port else 0}"
    return {**os.environ, "LOGHUBD_OPS__LISTEN": listen}


def run_workers(count: int, argv: list[str], cfg: Config) -> int:
    base = cfg.consumer.name or default_consumer_name()
    names = [f"{base}-{i}" for i in range(count)]

    def spawn(index: int) -> subprocess.Popen[bytes]:
        return subprocess.Popen(_child_argv(argv, names[index]), env=_child_env(cfg, index))

    children: dict[str, subprocess.Popen[bytes]] = {}
    restarts: dict[str, float] = {}
    stopping = False

    def forward(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        for child in children.values():
            if child.poll() is None:
                child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    for index, name in enumerate(names):
        children[name] = spawn(index)
        log.info("worker_started", name=name, pid=children[name].pid)
    worst = 0
    while True:
        alive = False
        for name, child in list(children.items()):
            code = child.poll()
            if code is None:
                alive = True
                continue
            if stopping:
                worst = max(worst, code)
                continue
            wait = 1.0 if time.monotonic() - restarts.get(name, 0) > 30 else 5.0
            log.warning("worker_died", name=name, exit_code=code, restart_in_s=wait)
            time.sleep(wait)
            restarts[name] = time.monotonic()
            children[name] = spawn(names.index(name))
            log.info("worker_restarted", name=name, pid=children[name].pid)
            alive = True
        if stopping and not alive:
            return worst
        time.sleep(0.2)
