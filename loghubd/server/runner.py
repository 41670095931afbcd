"""`loghubd serve`: the API server plus the expiry and timeout tickers, in one task group."""

from __future__ import annotations

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
    app = api.make_app(
        service, access_keys=keys, default_project=opts.default_project, metrics=ServerMetrics()
    )
    console.mount(
        app,
        service,
        opts.data_dir / "loghubd.sqlite3",
        access_keys=keys,
        token=opts.console_token,
        open_to_all=opts.console_open,
    )
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    try:
        site = web.TCPSite(runner, opts.host, opts.port, reuse_address=True)
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
