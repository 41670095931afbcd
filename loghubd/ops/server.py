"""The ops HTTP listener: /metrics, /healthz, /readyz, /status, and the web console at /
(aiohttp, in our task group).

Its connections go through serve's `ConnectionGuard`: at most `MAX_CONNECTIONS` open (then
503 at once), and a request's line and headers within `HEADER_TIMEOUT_S` (then 408). Without
them, whoever reaches the port could hold idle connections until the process ran out of file
descriptors, and the probes would stop answering."""

from __future__ import annotations

import asyncio
import hmac
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio
from aiohttp import web
from anyio.abc import TaskStatus
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry

from loghubd.console.refused import refused_credential
from loghubd.ops.health import Verdict
from loghubd.ops.metrics import exposition
from loghubd.server import http_errors
from loghubd.server.guard import ConnectionGuard, GuardedSite, attach

if TYPE_CHECKING:
    from loghubd.console.daemon_app import DaemonConsole

METRICS = web.AppKey("metrics", CollectorRegistry)
READINESS = web.AppKey[Callable[[], Verdict]]("readiness")
STATUS = web.AppKey[Callable[[], dict[str, Any]]]("status")
TOKEN = web.AppKey("status_token", str)

# Prometheus, the probes and a few console pages need a handful; a scrape's answer is small.
# No one address may hold more than MAX_PER_ADDRESS, so that one client cannot take every
# slot from the probes.
MAX_CONNECTIONS = 128
MAX_PER_ADDRESS = 16
HEADER_TIMEOUT_S = 10.0


def _json(value: object, status: int = 200) -> web.Response:
    return web.Response(
        status=status, text=json.dumps(value, indent=1), content_type="application/json"
    )


async def metrics(request: web.Request) -> web.Response:
    body = await exposition(request.app[METRICS])
    return web.Response(body=body, headers={"content-type": CONTENT_TYPE_LATEST})


async def healthz(request: web.Request) -> web.Response:
    # Answering at all proves the event loop runs.
    return _json({"status": "alive"})


async def readyz(request: web.Request) -> web.Response:
    verdict = request.app[READINESS]()
    if verdict.ready:
        return _json({"status": "ready"})
    return _json({"status": "not ready", "reasons": list(verdict.reasons)}, status=503)


async def status(request: web.Request) -> web.Response:
    token = request.app[TOKEN]
    given = request.headers.get("Authorization", "").encode()
    if token and not hmac.compare_digest(given, f"Bearer {token}".encode()):
        await refused_credential(request, "status_token_refused", "not the ops.status_token")
        return _json({"error": "a bearer token is required for /status"}, status=401)
    return _json(request.app[STATUS]())


def make_app(
    registry: CollectorRegistry,
    verdict: Callable[[], Verdict],
    status_view: Callable[[], dict[str, Any]],
    status_token: str = "",
    console: DaemonConsole | None = None,
) -> web.Application:
    """`registry` is what /metrics serves, `verdict` what /readyz answers (computed per
    request from live state), `status_view` what /status shows; `console` adds the web
    console's routes (/, /login, /logout, /static/...)."""
    app = web.Application()
    app[METRICS] = registry
    app[READINESS] = verdict
    app[STATUS] = status_view
    app[TOKEN] = status_token
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/status", status)
    if console is not None:
        console.add_routes(app)
    return app


class ListenError(OSError):
    """`ops.listen` cannot be listened on (taken, not this host's address, not resolvable);
    the errno and reason are the socket's."""


async def serve_ops(
    app: web.Application, listen: str, *, task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED
) -> None:
    host, _, port = listen.rpartition(":")
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    guard = ConnectionGuard(
        http_errors.protocol_factory(runner),
        max_connections=MAX_CONNECTIONS,
        header_timeout=HEADER_TIMEOUT_S,
        max_per_address=MAX_PER_ADDRESS,
    )
    attach(app, guard)
    await runner.setup()
    try:
        address = host.strip("[]") or "127.0.0.1"
        try:
            listener = await asyncio.get_running_loop().create_server(
                guard, address, int(port), reuse_address=True, start_serving=False
            )
        except OSError as exc:
            raise ListenError(exc.errno, exc.strerror or str(exc)) from exc
        await GuardedSite(runner, address, int(port), listener).start()
        task_status.started(listener.sockets[0].getsockname()[1])
        await anyio.sleep_forever()
    finally:
        with anyio.CancelScope(shield=True):
            await runner.cleanup()
