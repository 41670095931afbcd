"""The console's mount in `loghubd serve`: `/console` on hosts that name no project.

`mount(app, ...)` adds one middleware to the SLS API application: requests for `/console...`
whose Host names no project (an IP address or a single label such as `localhost`) are
answered here; everything else goes on to the API untouched. SLS paths never start with
`/console` on such hosts (they would be project-less API calls, which do not exist), so the
two cannot collide.

Pages: `/console` (projects and logstores), `/console/p/<project>/l/<logstore>` (shards and
groups), `.../g/<group>` (a consumer group), `.../tail?shard=&q=` (the newest logs through an
SPL filter), `/console/login`, `/console/logout`, `/console/static/<file>`.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

import structlog
from aiohttp import web

from loghubd.console import access as A
from loghubd.console import html as H
from loghubd.console import serve_pages as pages
from loghubd.console import web as W
from loghubd.console.serve_data import Reader
from loghubd.server.api import project_from_host
from loghubd.server.auth import AccessKey
from loghubd.server.service import LogService

PREFIX = "/console"
FRAME = H.Frame(PREFIX, "loghubd serve")
_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _names_no_project(host: str) -> bool:
    """Whether a Host header names no project: an IP address or a single label."""
    return project_from_host(host, "") == ""


class ServeConsole:
    """The console pages of one `loghubd serve` (see the module docstring)."""

    def __init__(self, reader: Reader, gate: A.Gate) -> None:
        self.reader = reader
        self.gate = gate

    @web.middleware
    async def middleware(self, request: web.Request, handler: _Handler) -> web.StreamResponse:
        path = request.path
        if (path == PREFIX or path.startswith(PREFIX + "/")) and _names_no_project(request.host):
            return await self.dispatch(request)
        return await handler(request)

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path[len(PREFIX) :].split("/") if p]
        if parts[:1] == ["static"] and len(parts) == 2:
            return W.static(parts[1])
        if parts == ["login"]:
            return await W.login(request, FRAME, self.gate)
        if parts == ["logout"] and request.method == "POST":
            return await W.logout(request, FRAME)
        if request.method not in ("GET", "HEAD"):
            raise web.HTTPMethodNotAllowed(request.method, ["GET"])
        viewer = W.guard(request, FRAME, self.gate)
        if isinstance(viewer, web.Response):
            return viewer
        return W.answer(request, FRAME, self.page(parts, request.query, viewer), viewer)

    def page(self, parts: list[str], query: Mapping[str, str], viewer: A.Viewer) -> W.View:
        now = time.time()
        if not parts:
            visible = [
                (p, [ls for ls in stores if A.sees_logstore(viewer, p, ls.name)])
                for p, stores in self.reader.projects()
            ]
            return pages.index(FRAME, [(p, s) for p, s in visible if s or viewer.policy is None])
        if len(parts) < 4 or parts[0] != "p" or parts[2] != "l":
            return _missing("No such page.")
        project, name, rest = parts[1], parts[3], parts[4:]
        ls = self.reader.find(project, name)
        # A logstore the viewer may not see is answered exactly like one that does not exist.
        if ls is None or not A.sees_logstore(viewer, project, name):
            return _missing(f"No logstore {name} in project {project}.")
        page = query.get("page")
        if not rest:
            return pages.logstore(FRAME, self.reader.logstore(ls, now, page), viewer)
        if rest[0] == "g" and len(rest) == 2:
            if not viewer.may(A.SEE_GROUP, project, name, rest[1]):
                return _missing(f"No consumer group {rest[1]}.")
            group = self.reader.group(
                ls, rest[1], now, page, consumers_page=query.get("consumers_page")
            )
            if group is None:
                return _missing(f"No consumer group {rest[1]}.")
            return pages.group(FRAME, group, now)
        if rest == ["tail"]:
            if not viewer.may(A.SEE_LOGS, project, name):
                return _missing("Your access key may not read this logstore's logs.")
            raw = query.get("shard", "")
            shard = int(raw) if raw.isdigit() and len(raw) < 10 else None
            if shard is not None and not self.reader.has_shard(ls.id, shard):
                shard = None
            text = query.get("q", "")
            view = self.reader.tail(ls, self.reader.shard_count(ls.id), shard, text)
            # the shard list (a select of every shard) only when the whole page is shown
            return pages.tail(FRAME, ls, lambda: self.reader.shard_ids(ls.id), shard, text, view)
        return _missing("No such page.")


def _missing(text: str) -> W.View:
    return W.View("Not found", H.tag("p", text), status=404)


CONSOLE = web.AppKey("console", ServeConsole)
SESSION_KEY_FILE = "console-session.key"
log = structlog.get_logger("loghubd.console")


def _kept_key(path: Path) -> bytes:
    """The random key console sessions are signed with, kept in the data directory (made
    on first start, readable by the owner only) so that a restart keeps people signed in.
    If it cannot be kept, a key for this run only (a restart signs everyone out)."""
    try:
        kept = path.read_bytes()
        if len(kept) >= 32:
            return kept
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("console_session_key_unreadable", path=str(path), error=str(exc))
        return secrets.token_bytes(32)
    kept = secrets.token_bytes(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(kept)
    except OSError as exc:
        log.warning("console_session_key_not_kept", path=str(path), error=str(exc))
    return kept


def mount(
    app: web.Application,
    service: LogService,
    db_path: Path,
    *,
    access_keys: Mapping[str, AccessKey],
    token: str = "",
    open_to_all: bool = False,
) -> ServeConsole:
    """Serve the console from `app` (before it starts); the reader closes with the app."""
    kept = _kept_key(db_path.parent / SESSION_KEY_FILE)
    gate = A.Gate(dict(access_keys), token, open_to_all, A.session_secret(kept, access_keys, token))
    console = ServeConsole(Reader(service, db_path), gate)
    app[CONSOLE] = console
    app.middlewares.append(console.middleware)

    async def close(_app: web.Application) -> None:
        console.reader.close()

    app.on_cleanup.append(close)
    return console
