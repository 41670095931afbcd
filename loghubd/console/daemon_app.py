"""The console's mount on the daemon's ops listener: `/` (one page), `/login`, `/logout`,
`/static/<file>`.

The page is built from the daemon's read-only snapshot (`loghubd.consumer.snapshot`, what
`/status` and `/readyz` are built from too) and the snapshots `run_sampling` keeps for the
last minutes. With an ops
`status_token` the page needs a sign-in with that token, as `/status` needs it as a bearer
token; without one it is open, like `/status`.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping

import anyio
from aiohttp import web

import loghubd
from loghubd.console import access as A
from loghubd.console import daemon_pages as pages
from loghubd.console import html as H
from loghubd.console import web as W
from loghubd.console.daemon_data import History
from loghubd.consumer.snapshot import DaemonSnapshot

FRAME = H.Frame("", "loghubd run")
SAMPLE_EVERY_S = 2.0


class DaemonConsole:
    def __init__(
        self,
        snapshot: Callable[[], DaemonSnapshot],
        processors: Mapping[str, str],
        token: str = "",
    ) -> None:
        self.snapshot = snapshot
        self.processors = dict(processors)
        # The daemon's ops token is the only credential; no token: open like /status.
        self.gate = A.Gate({}, token, True, secrets.token_bytes(32))
        self.history = History()

    def sample(self) -> None:
        self.history.record(self.snapshot())

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
            self.snapshot(),
            self.history,
            self.processors,
            loghubd.__version__,
            request.query.get("page"),
        )
        return W.answer(request, FRAME, view, viewer)

    async def _static(self, request: web.Request) -> web.StreamResponse:
        return W.static(request.match_info["name"])

    async def _login(self, request: web.Request) -> web.StreamResponse:
        return await W.login(request, FRAME, self.gate)

    async def _logout(self, request: web.Request) -> web.StreamResponse:
        return await W.logout(request, FRAME)
