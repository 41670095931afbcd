"""`loghubd run --workers N`: N consumer processes of one group on this host.

Each child is `loghubd run` with the same arguments and a suffixed consumer name
(`<name>-<i>`). A child that dies is restarted (with a short backoff so a crash loop does not
spin); SIGTERM/SIGINT are forwarded to every child and we wait for them to finish their
graceful shutdown. The exit code is the worst of the children's.
"""

from __future__ import annotations

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
    for i, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        if arg in ("--workers", "--name"):
            skip = True
            continue
        if arg.startswith(("--workers=", "--name=")):
            continue
        out.append(arg)
        del i
    return [sys.executable, "-m", "loghubd", *out, "--name", name]


def run_workers(count: int, argv: list[str], cfg: Config) -> int:
    base = cfg.consumer.name or default_consumer_name()
    names = [f"{base}-{i}" for i in range(count)]
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
    for name in names:
        children[name] = subprocess.Popen(_child_argv(argv, name))
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
            children[name] = subprocess.Popen(_child_argv(argv, name))
            alive = True
        if stopping and not alive:
            return worst
        time.sleep(0.2)
