"""The ops HTTP listener: /metrics, /healthz, /readyz, /status, and the web console at /
(aiohttp, in our task group)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio
from aiohttp import web
from anyio.abc import TaskStatus
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from loghubd.ops.health import Verdict

if TYPE_CHECKING:
    from loghubd.console.daemon_app import DaemonConsole

METRICS = web.AppKey("metrics", CollectorRegistry)
READINESS = web.AppKey[Callable[[], Verdict]]("readiness")
STATUS = web.AppKey[Callable[[], dict[str, Any]]]("status")
TOKEN = web.AppKey("status_token", str)


def _json(value: object, status: int = 200) -> web.Response:
    return web.Response(
        status=status, text=json.dumps(value, indent=1), content_type="application/json"
    )


async def metrics(request: web.Request) -> web.Response:
    body = generate_latest(request.app[METRICS])
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
    if token and request.headers.get("Authorization", "") != f"Bearer {token}":
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
    await runner.setup()
    try:
        site = web.TCPSite(runner, host.strip("[]") or "127.0.0.1", int(port), reuse_address=True)
        try:
            await site.start()
        except OSError as exc:
            raise ListenError(exc.errno, exc.strerror or str(exc)) from exc
        task_status.started(runner.addresses[0][1])
        await anyio.sleep_forever()
    finally:
        with anyio.CancelScope(shield=True):
            await runner.cleanup()
