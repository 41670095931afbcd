"""aiohttp glue shared by both mounts: static files, the sign-in and sign-out pages, the
access check in front of every page, and answering a page or one of its live regions."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from aiohttp import web

from loghubd.console import html as H
from loghubd.console.access import COOKIE, SESSION_S, Gate, Viewer
from loghubd.console.refused import log, refused_credential

STATIC = Path(__file__).with_name("static")
_TYPES = {".css": "text/css", ".js": "text/javascript"}
REGION_HEADER = "X-Console-Region"
_SECURITY = {
    # Everything is served from here: no CDN, no inline script, no framing.
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


@dataclass(frozen=True, slots=True)
class View:
    """A rendered page: its title, breadcrumbs, body, and the live regions inside the body
    (by element id) that a refresh may ask for alone. The body may be a function that
    renders it: a refresh that asks for one region does not pay for the rest."""

    title: str
    body: H.Markup | Callable[[], H.Markup]
    crumbs: tuple[tuple[str, str], ...] = ()
    regions: Mapping[str, H.Markup] = field(default_factory=dict)
    status: int = 200

    def markup(self) -> H.Markup:
        return self.body if isinstance(self.body, str) else self.body()


def static(name: str) -> web.Response:
    path = STATIC / name
    if "/" in name or path.suffix not in _TYPES or not path.is_file():
        raise web.HTTPNotFound(text="no such file")
    return web.Response(
        body=path.read_bytes(),
        content_type=_TYPES[path.suffix],
        headers={"Cache-Control": "max-age=300", "X-Content-Type-Options": "nosniff"},
    )


def answer(request: web.Request, frame: H.Frame, view: View, viewer: Viewer) -> web.Response:
    region = request.headers.get(REGION_HEADER)
    if region is not None:
        part = view.regions.get(region)
        if part is None:
            return web.Response(status=404, text="no such region", headers=_SECURITY)
        return web.Response(text=part, content_type="text/html", headers=_SECURITY)
    doc = H.page(frame, view.title, view.markup(), crumbs=view.crumbs, user=viewer.name)
    return web.Response(text=doc, status=view.status, content_type="text/html", headers=_SECURITY)


def guard(request: web.Request, frame: H.Frame, gate: Gate) -> Viewer | web.Response:
    """The viewer, or the answer to send instead (a refusal, or the way to the sign-in)."""
    if not gate.allows_address(request.remote):
        return web.Response(
            status=403,
            text="This console answers loopback clients only: start it with --console-open, "
            "or give it credentials (--access-keys or --console-token).",
            headers=_SECURITY,
        )
    viewer = gate.viewer(request.cookies.get(COOKIE), time.time())
    if viewer is not None:
        return viewer
    if REGION_HEADER in request.headers:
        return web.Response(status=401, text="sign in again", headers=_SECURITY)
    target = H.url(frame.prefix + "/login", next=request.path_qs)
    raise web.HTTPSeeOther(target)


def _next(value: str, frame: H.Frame) -> str:
    """Where to go after signing in: a path on this console only (no open redirect)."""
    parts = urlsplit(value)
    home = frame.prefix or "/"
    if parts.scheme or parts.netloc or not value.startswith(home) or value.startswith("//"):
        return home
    return value


def login_view(frame: H.Frame, gate: Gate, next_url: str, error: str = "") -> View:
    fields: list[H.Markup] = []
    if error:
        fields.append(H.tag("p", error, class_="error", role="alert", id="login-error"))
    if gate.keys:
        fields += [
            H.tag(
                "label",
                ["Access key id", H.tag("input", name="key_id", autocomplete="username")],
            ),
            H.tag(
                "label",
                [
                    "Access key secret",
                    H.tag("input", name="secret", type="password", autocomplete="current-password"),
                ],
            ),
        ]
    if gate.token:
        fields.append(
            H.tag(
                "label",
                [
                    "Console token" + (" (instead of a key)" if gate.keys else ""),
                    H.tag("input", name="token", type="password", autocomplete="off"),
                ],
            )
        )
    fields.append(H.tag("input", type="hidden", name="next", value=_next(next_url, frame)))
    fields.append(H.tag("button", "Sign in", type="submit"))
    form = H.tag("form", fields, method="post", action=frame.prefix + "/login", class_="login")
    return View("Sign in", form, status=401 if error else 200)


async def login(request: web.Request, frame: H.Frame, gate: Gate) -> web.Response:
    if not gate.needs_sign_in:
        raise web.HTTPSeeOther(frame.prefix or "/")
    if not gate.allows_address(request.remote):
        return web.Response(status=403, text="loopback clients only", headers=_SECURITY)
    if request.method == "GET":
        view = login_view(frame, gate, request.query.get("next", ""))
        return answer(request, frame, view, Viewer(""))
    form = await request.post()
    key_id, secret, token = (str(form.get(k, "")).strip() for k in ("key_id", "secret", "token"))
    now = time.time()
    try:
        subject = gate.sign_in(key_id, secret, token, now)
    except ValueError as exc:
        # The key id only if it is one: a secret pasted in the wrong field is not logged.
        named = {"key_id": key_id} if key_id in gate.keys else {}
        await refused_credential(request, "console_sign_in_refused", str(exc), **named)
        view = login_view(frame, gate, str(form.get("next", "")), str(exc))
        return answer(request, frame, view, Viewer(""))
    log.info("console_signed_in", remote=request.remote or "", subject=subject)
    response = web.HTTPSeeOther(_next(str(form.get("next", "")), frame))
    response.set_cookie(
        COOKIE,
        gate.cookie(subject, now),
        max_age=int(SESSION_S),
        path=frame.prefix or "/",
        httponly=True,
        samesite="Strict",
    )
    return response


async def logout(request: web.Request, frame: H.Frame) -> web.Response:
    response = web.HTTPSeeOther(frame.prefix + "/login" if frame.prefix else "/login")
    response.del_cookie(COOKIE, path=frame.prefix or "/")
    return response
