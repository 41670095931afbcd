"""`loghubd serve`: the API server plus the expiry and timeout tickers, in one task group,
over a data directory it holds locked (`datadir`)."""

from __future__ import annotations

import asyncio
import errno
import socket
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import structlog
from aiohttp import web
from anyio.abc import TaskStatus

from loghubd.console import serve_app as console
from loghubd.proxy import is_loopback
from loghubd.server import api, auth, datadir, http_errors
from loghubd.server.guard import ConnectionGuard, GuardedSite
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
    metrics_open: bool = False  # with access keys, /metrics answers more than loopback
    service_hosts: tuple[str, ...] = api.DEFAULT_SERVICE_HOSTS
    max_inflight_body_bytes: int = 64 * 1024 * 1024
    max_connections: int = 512
    max_connections_per_address: int = 0  # 0: no limit per client address
    header_timeout: float = 20.0
    body_timeout: float = 120.0
    keepalive_timeout: float = 75.0


def listen_problem(host: str, port: int, exc: OSError) -> str:
    """What `loghubd serve` says when it cannot listen, naming the flag to change: --host for
    a name that does not resolve or an address that is not this host's, else --port."""
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    reason = exc.strerror or str(exc)
    other_host = "give another --host (an address of this host; 0.0.0.0 for all of them)"
    if isinstance(exc, socket.gaierror):
        return f"cannot listen on {where}: {host} does not resolve ({reason}); {other_host}"
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"cannot listen on {where}: {reason}; {host} is not this host's: {other_host}"
    if exc.errno == errno.EACCES:
        return (
            f"cannot listen on {where}: {reason}; pick another --port "
            f"(one below 1024 needs privileges)"
        )
    return f"cannot listen on {where}: {reason}; pick another --port, or stop what holds it"


def exposed_addresses(bound: Iterable[Any]) -> list[str]:
    """The addresses among `bound` (socket names, `(host, port, ...)`) that are not loopback,
    as `host:port` (`[host]:port` for IPv6): 0.0.0.0 and :: (every interface) included."""
    out = []
    for name in bound:
        host, port = str(name[0]), int(name[1])
        if not is_loopback(host):  # (not an IP address, a socket family without one: said)
            out.append(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
    return out


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
    """Serve until `shutdown_trigger` returns; reports the bound port through task_status.

    A server that cannot start changes nothing it need not: the access keys are read
    (AccessKeysError), the data directory is locked for the server's whole life
    (`datadir.held`: DataDirInUse, DataDirUnusable), the port is bound (OSError, see
    `listen_problem`), and only then are the store and the console's key made."""
    keys = auth.load_access_keys(opts.access_keys) if opts.access_keys else {}
    with datadir.held(opts.data_dir):
        await _serve(opts, keys, shutdown_trigger, task_status)


async def _serve(
    opts: ServeOptions,
    keys: dict[str, auth.AccessKey],
    shutdown_trigger: Callable[[], Awaitable[None]],
    task_status: TaskStatus[int],
) -> None:
    runner: web.AppRunner

    def protocol() -> asyncio.Protocol:  # aiohttp's, built once the runner is set up
        return answering()

    # How long aiohttp drains a body it was answered without reading (401, 413, 503), so that
    # the client can read the answer: not longer than any body may take.
    lingering = min(10.0, opts.body_timeout)
    guard = ConnectionGuard(
        protocol,
        max_connections=opts.max_connections,
        max_per_address=opts.max_connections_per_address,
        header_timeout=opts.header_timeout,
        lingering_time=lingering,
    )
    # NOTE: bound before the store is made, so that a port that is taken (or a --host that is
    # not this host's) leaves the data directory as it was; it accepts connections only once
    # the site starts below (a connection before that is refused, as if nothing were there).
    listener = await asyncio.get_running_loop().create_server(
        guard, opts.host, opts.port, reuse_address=True, start_serving=False
    )
    try:
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
            metrics_open=opts.metrics_open,
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
        answering = http_errors.protocol_factory(runner)
        await runner.setup()
        try:
            site = GuardedSite(runner, opts.host, opts.port, listener)
            await site.start()
            port = runner.addresses[0][1]
            # The warnings come once the site is bound (a server that cannot start has none)
            # and before `serving`: whoever waits for `serving` has them all in the log.
            if not keys:
                log.warning("signatures_not_checked", reason="no --access-keys file given")
                exposed = exposed_addresses(s.getsockname() for s in listener.sockets)
                if exposed:
                    log.error(
                        "exposed_without_authentication",
                        addresses=exposed,
                        hint="no --access-keys and not on loopback: anyone who can reach "
                        f"{', '.join(exposed)} can read, write and delete every project's "
                        "logs; give --access-keys FILE, or --host 127.0.0.1",
                    )
            shared = datadir.open_to_others(opts.data_dir)
            if shared is not None:
                log.warning(
                    "data_dir_open_to_others",
                    data_dir=str(opts.data_dir),
                    mode=oct(shared),
                    hint=f"other local users may read the stored logs; chmod 700 {opts.data_dir}",
                )
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
    finally:
        listener.close()  # if the site never started (cleanup closed it if it did)
