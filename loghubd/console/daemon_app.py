"""The console's mount on the daemon's ops listener: `/` (one page), `/login`, `/logout`,
`/static/<file>`.

The page is built from the daemon's read-only status (what `/status` serves), its readiness
verdict and the samples `run_sampling` keeps for the last minutes. With an ops
`status_token` the page needs a sign-in with that token, as `/status` needs it as a bearer
token; without one it is open, like `/status`.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Mapping
from typing import Any

import anyio
from aiohttp import web
from prometheus_client import CollectorRegistry

import loghubd
from loghubd.console import access as A
from loghubd.console import daemon_pages as pages
from loghubd.console import html as H
from loghubd.console import web as W
from loghubd.console.daemon_data import History, consumed_by_shard
from loghubd.ops.health import Verdict

FRAME = H.Frame("", "loghubd run")
SAMPLE_EVERY_S = 2.0


class DaemonConsole:
    def __init__(
        self,
        status: Callable[[], dict[str, Any]],
        verdict: Callable[[], Verdict],
        registry: CollectorRegistry,
        processors: Mapping[str, str],
        token: str = "",
    ) -> None:
        self.status = status
        self.verdict = verdict
        self.registry = registry
        self.processors = dict(processors)
        # The daemon's ops token is the only credential; no token: open like /status.
        self.gate = A.Gate({}, token, True, secrets.token_bytes(32))
        self.history = History()

    def sample(self) -> None:
        consumed = consumed_by_shard(list(self.registry.collect()))
        self.history.record(time.time(), self.status(), consumed)

    async def run_sampling(self, every: float = SAMPLE_EVERY_S) -> None:
        while True:
            self.sample()
            await anyio.sleep(every)

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/", self._page)
        app.router.add_get("/static/{name}", self._static)
        app.router.add_route("*", "/login", self._login)
        app.router.add_post("/logout", self._logout)

    async def _page(self, request: web.Request) -> web.StreamResponse:
        viewer = W.guard(request, FRAME, self.gate)
        if isinstance(viewer, web.Response):
            return viewer
        view = pages.daemon(
            self.status(),
            self.verdict(),
            self.history,
            self.processors,
            loghubd.__version__,
            time.time(),
        )
        return W.answer(request, FRAME, view, viewer)

    async def _static(self, request: web.Request) -> web.StreamResponse:
        return W.static(request.match_info["name"])

    async def _login(self, request: web.Request) -> web.StreamResponse:
        return await W.login(request, FRAME, self.gate)

    async def _logout(self, request: web.Request) -> web.StreamResponse:
        return await W.logout(request, FRAME)
