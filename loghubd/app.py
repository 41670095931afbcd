"""Composition root of `loghubd run`: builds every object, owns the root task group and the
bounded shutdown.

One daemon consumes one or more sources (`[[sources]]`, or the single `[source]` form named
"default") in one event loop, each run by a `loghubd.consumer.runner.SourceRunner`; `Daemon`
owns the ops listener, the shutdown trigger and the runners; its ops views are built from
`snapshot()` (`loghubd.ops.views`). Sources are independent: one that cannot start or crashes
is logged, `/readyz` reports it, the others go on, and the daemon exits 1 at shutdown; when
every source failed to start, the daemon exits 1 at once.

Shutdown order, per source (SIGTERM/SIGINT, or the injected trigger in tests): stop fetching;
let in-flight batches finish within `shutdown_grace` while heartbeats go on (so the shards
stay ours meanwhile); commit fenced checkpoints; run processor shutdowns; hand the shards back
(`leave`, a loghubd extension; against a server without it we simply stop heartbeating and
the group timeout frees them); exit 0 — or 1 when some checkpoint could not be flushed, or
some processor was still busy when the grace ended. Processor code that never returns does
not keep the process alive: see `loghubd.shutdown`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import structlog

from loghubd import shutdown
from loghubd.config import Config
from loghubd.console.daemon_app import DaemonConsole
from loghubd.consumer.runner import SourceRunner
from loghubd.consumer.snapshot import DaemonSnapshot
from loghubd.consumer.startup import StartupError
from loghubd.ops import health, views
from loghubd.ops.loopwatch import LoopWatch
from loghubd.ops.metrics import ConfigReloads, labelled_by_source
from loghubd.ops.server import make_app, serve_ops
from loghubd.plugins.configured import naming_source
from loghubd.plugins.manager import Plugins

__all__ = ["Daemon", "StartupError", "default_consumer_name"]

log = structlog.get_logger("loghubd.app")

STUCK_POLL_S = 0.1  # how often a shutdown looks whether only stuck processor code is left


def default_consumer_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class Daemon:
    """The whole `loghubd run`: one `SourceRunner` per source, the ops listener, shutdown."""

    def __init__(self, cfg: Config, plugins: Plugins) -> None:
        self.cfg = cfg
        self.config_reloads = ConfigReloads(time.time())
        self.consumer = cfg.consumer.name or default_consumer_name()
        self.runners: list[SourceRunner] = []
        self.loop_watch = LoopWatch()
        for warning in cfg.warnings:
            log.warning("config_key_deprecated", problem=warning)
        for spec in cfg.sources:
            with naming_source(cfg, spec):  # the processor refused its options
                self.runners.append(SourceRunner(spec, plugins, self.consumer))

    def snapshot(self) -> DaemonSnapshot:
        """The whole daemon as it is now, read-only (`loghubd.consumer.snapshot`): what every
        ops view is built from."""
        sources = tuple(r.snapshot() for r in self.runners)
        verdict = self._with_loop(views.readiness(sources))
        return DaemonSnapshot(
            consumer=self.consumer,
            sources=sources,
            ready=verdict.ready,
            reasons=verdict.reasons,
            taken_at=time.time(),
        )

    def verdict(self) -> health.Verdict:
        return self._with_loop(views.readiness([r.snapshot() for r in self.runners]))

    def _with_loop(self, verdict: health.Verdict) -> health.Verdict:
        """`verdict`, not ready while a recent block of the event loop is named first."""
        blocked = self.loop_watch.recent_block(time.monotonic())
        if blocked is None:
            return verdict
        return health.Verdict(False, (blocked, *verdict.reasons))

    def status(self) -> dict[str, Any]:
        return {**views.status(self.snapshot()), "config": views.config_status(self.config_reloads)}

    async def run(
        self,
        shutdown_trigger: Callable[[], Awaitable[None]],
        *,
        on_ready: Callable[[str], None] = lambda _state: None,
        watchdog_interval: float = 0.0,
    ) -> int:
        """Run until `shutdown_trigger` returns, or until every source has stopped by itself
        (bounded runs done, or failed). `on_ready` receives sd_notify states (READY=1,
        WATCHDOG=1, STOPPING=1); WATCHDOG=1 is sent every `watchdog_interval` seconds from the
        event loop itself, so a stuck loop stops the pings. Raises StartupError when no source
        could start."""
        cfg = self.cfg
        async with contextlib.AsyncExitStack() as stack:
            for runner in self.runners:
                runner.build(await stack.enter_async_context(runner.session()))
                runner.metrics.ready.set_function(functools.partial(_ready, runner))
            registry = labelled_by_source(
                [(r.name, r.metrics.registry) for r in self.runners], self.config_reloads
            )
            console = DaemonConsole(
                self.snapshot,
                {r.name: r.spec.processor.name for r in self.runners},
                cfg.ops.status_token,
            )
            ops_app = make_app(
                registry, self.verdict, self.status, cfg.ops.status_token, console=console
            )
            async with anyio.create_task_group() as tg:
                tg.start_soon(console.run_sampling)
                port = await tg.start(serve_ops, ops_app, cfg.ops.listen)
                log.info("ops_listening", listen=f"{cfg.ops.host}:{port}")
                stop = anyio.Event()

                async def trigger() -> None:
                    await shutdown_trigger()
                    on_ready("STOPPING=1")
                    stop.set()

                tg.start_soon(trigger)
                tg.start_soon(self._exit_if_stuck)
                tg.start_soon(self.loop_watch.run)  # names a coroutine that holds the loop
                waiting = len(self.runners)
                settled = anyio.Event()

                def started() -> None:
                    # Ready once one source runs: a source whose service is down at start-up
                    # retries for as long as it takes, and must not hold the others back
                    # (systemd would time the whole daemon out).
                    nonlocal waiting
                    waiting -= 1
                    if waiting == 0 or any(r.state == "running" for r in self.runners):
                        settled.set()

                async with anyio.create_task_group() as sources:
                    for runner in self.runners:
                        sources.start_soon(runner.run, stop, started, name=f"source-{runner.name}")
                    await settled.wait()
                    if any(r.state not in ("failed", "stopped") for r in self.runners):
                        on_ready("READY=1")
                        if watchdog_interval:
                            tg.start_soon(_watchdog, on_ready, watchdog_interval)
                tg.cancel_scope.cancel()
        failed = [r for r in self.runners if r.state == "failed"]
        if failed and len(failed) == len(self.runners):
            codes = {r.exit_code for r in failed}
            raise StartupError(
                "; ".join(_named(r, len(self.runners)) for r in failed),
                codes.pop() if len(codes) == 1 else 1,
            )
        unclean = [r.name for r in self.runners if not r.clean]
        if unclean:
            log.error("daemon_stopped", unclean_sources=unclean)
            return 1
        log.info("shutdown_complete")
        return 0

    def failed_shards_only(self) -> bool:
        """Whether the shutdown was unclean only because shards had stopped on a failure
        (parked: a processor that gave up or could not start): everything else committed and
        closed. A reload goes on then: the new configuration may be the cure."""
        for r in self.runners:
            if r.clean:
                continue
            sup = r.supervisor
            if r.state == "failed" or sup is None or not sup.failed:
                return False
            if sup.unflushed or sup.abandoned:
                return False
        return True

    def abandoned(self) -> list[str]:
        """Shards whose processor was still busy when the shutdown grace ended, as
        `source/shard`: their worker threads may never end (see `loghubd.shutdown`)."""
        return [
            f"{r.name}/{shard}"
            for r in self.runners
            if r.supervisor is not None
            for shard in r.supervisor.abandoned
        ]

    async def _exit_if_stuck(self) -> None:
        """Once every source has finished its shutdown (committed, left the group), a shard
        task that never ended (processor code ignoring cancellation) would keep the task
        groups, and the process, open for ever: end the process then, exit code 1."""
        final = ("stopped", "done", "failed")
        while True:
            await anyio.sleep(STUCK_POLL_S)
            if not all(r.state in final for r in self.runners):
                continue
            stuck = [
                f"{r.name}/{shard}"
                for r in self.runners
                if r.supervisor is not None
                for shard in r.supervisor.unreturned
            ]
            if stuck:
                shutdown.exit_now(1, "exiting_with_stuck_processors", shards=stuck)


def _ready(runner: SourceRunner) -> float:
    """`loghubd_ready` of one source: what /readyz would say of it alone."""
    return float(views.readiness([runner.snapshot()]).ready)


def _named(runner: SourceRunner, count: int) -> str:
    return runner.error if count == 1 else f"source {runner.name}: {runner.error}"


async def _watchdog(notify: Callable[[str], None], interval: float) -> None:
    while True:
        notify("WATCHDOG=1")
        await anyio.sleep(interval)
