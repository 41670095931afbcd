"""`loghubd serve`: the API server plus the expiry and timeout tickers, in one task group."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import anyio
import structlog
from aiohttp import web
from anyio.abc import TaskStatus

from loghubd.console import serve_app as console
from loghubd.server import api, auth
from loghubd.server.guard import ConnectionGuard
from loghubd.server.metrics import ServerMetrics
from loghubd.server.service import Limits, LogService
from loghubd.server.storage import Storage

log = structlog.get_logger("loghubd.server")


@dataclass(frozen=True, slots=True)
class ServeOptions:
    data_dir: Path
    host: str = "127.0.0.1"
    port: int = 7100
    access_keys: Path | None = None
    default_project: str = ""
    max_body_bytes: int = 10 * 1024 * 1024
    max_groups_per_logstore: int = 30
    ttl_day_seconds: float = 86400.0
    tick_interval: float = 1.0
    expire_interval: float = 60.0
    fsync: bool = False
    console_token: str = ""  # signs in to /console (besides the access keys)
    console_open: bool = False  # without credentials, /console answers more than loopback
    service_hosts: tuple[str, ...] = api.DEFAULT_SERVICE_HOSTS
    max_inflight_body_bytes: int = 64 * 1024 * 1024
    max_connections: int = 512
    header_timeout: float = 20.0
    body_timeout: float = 120.0
    keepalive_timeout: float = 75.0


class GuardedSite(web.TCPSite):
    """A TCP site whose connections go through a `ConnectionGuard` first."""

    def __init__(self, runner: web.AppRunner, host: str, port: int, guard: ConnectionGuard):
        super().__init__(runner, host, port, reuse_address=True)
        self._guard = guard

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._guard, self._host, self._port, reuse_address=True
        )


async def _every(interval: float, fn: Callable[[], object]) -> None:
    while True:
        await anyio.sleep(interval)
        fn()


async def serve(
    opts: ServeOptions,
    *,
    shutdown_trigger: Callable[[], Awaitable[None]],
    task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until `shutdown_trigger` returns; reports the bound port through task_status."""
    keys = auth.load_access_keys(opts.access_keys) if opts.access_keys else {}
    if not keys:
        log.warning("signatures_not_checked", reason="no --access-keys file given")
    storage = Storage(opts.data_dir / "loghubd.sqlite3", fsync=opts.fsync)
    service = LogService(
        storage,
        time.time,
        Limits(opts.max_body_bytes, opts.max_groups_per_logstore, opts.ttl_day_seconds),
    )
    settings = api.HttpSettings(
        access_keys=keys,
        default_project=opts.default_project,
        service_hosts=opts.service_hosts,
        body_timeout=opts.body_timeout,
        max_inflight_body_bytes=opts.max_inflight_body_bytes,
    )
    runner: web.AppRunner

    def protocol() -> asyncio.Protocol:  # aiohttp's, built once the runner is set up
        assert runner.server is not None
        return runner.server()

    # How long aiohttp drains a body it was answered without reading (401, 413, 503), so that
    # the client can read the answer: not longer than any body may take.
    lingering = min(10.0, opts.body_timeout)
    guard = ConnectionGuard(
        protocol,
        max_connections=opts.max_connections,
        header_timeout=opts.header_timeout,
        lingering_time=lingering,
    )
    app = api.make_app(service, settings, metrics=ServerMetrics(), guard=guard)
    console.mount(
        app,
        service,
        opts.data_dir / "loghubd.sqlite3",
        access_keys=keys,
        token=opts.console_token,
        open_to_all=opts.console_open,
    )
    runner = web.AppRunner(
        app,
        access_log=None,
        handle_signals=False,
        keepalive_timeout=opts.keepalive_timeout,
        lingering_time=lingering,
    )
    await runner.setup()
    try:
        site = GuardedSite(runner, opts.host, opts.port, guard)
        await site.start()
        port = runner.addresses[0][1]
        log.info("serving", host=opts.host, port=port, data_dir=str(opts.data_dir))
        task_status.started(port)
        async with anyio.create_task_group() as tg:
            tg.start_soon(_every, opts.tick_interval, service.tick)
            tg.start_soon(_every, opts.expire_interval, service.expire)
            await shutdown_trigger()
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await runner.cleanup()
            storage.close()
            log.info("stopped")
