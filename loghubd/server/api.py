"""HTTP face of `loghubd serve`: SLS requests in, `LogService` calls, SLS answers out.

Every answer carries `x-log-requestid`; every failure is `{"errorCode", "errorMessage"}` with
the status of PROTOCOL.md §15. Nothing a client sends can produce a 5xx other than `503
ServerBusy` (too many bodies or connections at once, which SDKs retry): decoding problems are
4xx SLS errors, and an unexpected exception is logged and answered 500 (a bug to fix).

A request goes through these steps, in this order (the routes are `loghubd.server.routes`):
the route from method, path and kind of host; with `--access-keys` the signature, key, date
and token from the headers alone, without them a cross-site request from a web page
(`cross_site`) is refused; an API the table knows but loghubd does not implement is
refused here, naming it; the body, bounded (`loghubd.server.bodies`), then its digest against
the signed one; the `Target` with its names checked; the key's policy on that target; the
handler, acting on the same target.

Hosts are told apart the way SLS does: the service host (one of `--service-host`, an IP
address or a single label) names no project, `<project>.<service host>` names one; any other
name's first label is its project. Absolute-form request targets (an unmodified SDK behind
`HTTP_PROXY`) work because aiohttp parses them into the same path.
"""

from __future__ import annotations

import ipaddress
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from loghubd.ops.metrics import exposition
from loghubd.protocol import errors as E
from loghubd.server import auth, bodies, refusals, routes
from loghubd.server.addresses import is_loopback
from loghubd.server.call import Call, json_response
from loghubd.server.guard import ConnectionGuard, attach
from loghubd.server.metrics import ServerMetrics
from loghubd.server.service import LogService

log = structlog.get_logger("loghubd.server")

# Host names that name no project besides IPs and single labels: `sls.local` is the endpoint
# the docs recommend for SDKs that reach `loghubd serve` through HTTP_PROXY (`--service-host`
# adds others).
DEFAULT_SERVICE_HOSTS = ("localhost", "sls.local")


@dataclass(frozen=True, slots=True)
class HttpSettings:
    """What `make_app` needs besides the service (the `loghubd serve` flags)."""

    access_keys: Mapping[str, auth.AccessKey]
    default_project: str = ""
    service_hosts: tuple[str, ...] = DEFAULT_SERVICE_HOSTS
    body_timeout: float = 120.0
    max_inflight_body_bytes: int = 64 * 1024 * 1024
    metrics_open: bool = False  # with access keys, /metrics answers clients off loopback too


SERVICE = web.AppKey("service", LogService)
SETTINGS = web.AppKey("settings", HttpSettings)
METRICS = web.AppKey("metrics", ServerMetrics)
BUDGET = web.AppKey("body_budget", bodies.BodyBudget)
LIMITS = web.AppKey("body_limits", bodies.BodyLimits)
REFUSALS = web.AppKey("refusals", refusals.RefusalThrottle)


def _host_name(host: str) -> str:
    name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    return name.strip("[]").lower().rstrip(".")


def host_project(host: str, service_hosts: tuple[str, ...] = DEFAULT_SERVICE_HOSTS) -> str | None:
    """The project a `Host` names, or None for the service host (port stripped): an IP
    address, a single label or one of `service_hosts` is the service host; any other name's
    first label is the project (`demo.sls.local` and `demo.127.0.0.1` → `demo`)."""
    name = _host_name(host)
    try:
        ipaddress.ip_address(name)
        return None
    except ValueError:
        pass
    if "." not in name or name in service_hosts:
        return None
    return name.split(".", 1)[0]


_DEFAULT_PORTS = {"http": 80, "https": 443}


def cross_site(origin: str, host: str) -> bool:
    """Whether a request's `Origin` header names another host:port than its own `Host`: a web
    page of another site sent it (browsers send Origin on every cross-origin POST, PUT and
    DELETE; the SDKs and loghubd's own client never send one). Host names compare without
    case; a missing port is the default one of the Origin's scheme. An Origin that is not an
    http(s) URL with a host (`null` from a sandboxed page or a file) is another site."""
    try:
        page = urlsplit(origin.strip())
        own = urlsplit("//" + host.strip())
        if page.scheme not in _DEFAULT_PORTS or not page.hostname or not own.hostname:
            return True
        default = _DEFAULT_PORTS[page.scheme]
        page_port, own_port = page.port or default, own.port or default
    except ValueError:  # a port that is not a number, or out of range
        return True
    return (page.hostname, page_port) != (own.hostname, own_port)


# /metrics is unsigned (a scraper cannot sign SLS requests) and its labels name every project
# and logstore: where keys guard the data, it answers loopback only unless --metrics-open.
METRICS_CLOSED = {
    "errorCode": "Unauthorized",
    "errorMessage": "/metrics answers loopback clients only when serve has --access-keys "
    "(its labels name every project and logstore); start serve with --metrics-open to let "
    "other hosts scrape it",
}


def refuse_cross_site(headers: Mapping[str, str]) -> None:
    """Without `--access-keys`: a request a web page of another site sent is refused (403
    Unauthorized), so that a page cannot write to, or delete from, a serve on this machine
    (a text/plain POST needs no CORS preflight). `headers`: lower-case names."""
    origin = headers.get("origin")
    if origin is None:
        return
    host = headers.get("host", "")
    if cross_site(origin, host):
        raise E.Unauthorized(
            f"cross-site request refused: Origin {origin[:200]!r} is not Host {host[:200]!r}; "
            "loghubd serve without --access-keys refuses requests from web pages of other "
            "sites; start it with --access-keys (and sign the requests) to accept them",
            status=403,
        )


def project_from_host(
    host: str, default_project: str, service_hosts: tuple[str, ...] = DEFAULT_SERVICE_HOSTS
) -> str:
    """The project of a request: the one its Host names, else `default_project` ("" none)."""
    named = host_project(host, service_hosts)
    return default_project if named is None else named


async def handle(request: web.Request) -> web.StreamResponse:
    return await _answer(request, request.app[SETTINGS])


async def _answer(request: web.Request, settings: HttpSettings) -> web.StreamResponse:
    app = request.app
    host = request.headers.get("host", "")
    named = host_project(host, settings.service_hosts)
    if named is None and request.path == "/metrics" and request.method == "GET":
        if settings.access_keys and not settings.metrics_open and not is_loopback(request.remote):
            return json_response(METRICS_CLOSED, status=403)
        data = await exposition(app[METRICS].exposed)
        return web.Response(body=data, headers={"content-type": CONTENT_TYPE_LATEST})
    project = settings.default_project if named is None else named
    request_id = uuid.uuid4().hex[:24].upper()
    parts = tuple(p for p in request.path.split("/") if p)
    route: routes.Route | E.SlsError
    try:
        route = routes.resolve(request.method, parts, "service" if not project else "project")
    except E.SlsError as exc:  # answered after the key check, like any other refusal
        route = exc
    api = route.api_for(request.query).name if isinstance(route, routes.Route) else "Unknown"
    started = time.perf_counter()
    close = False
    try:
        response = await _handle(request, parts, project, route)
    except E.SlsError as exc:
        response = json_response(
            {"errorCode": exc.error_code, "errorMessage": exc.message}, status=exc.http_status
        )
        close = isinstance(exc, bodies.BodyTimeout)
        refusals.log_refusal(request, request_id, api, exc, request.app[REFUSALS])
    except Exception:
        log.exception("request_failed", api=api, path=request.path[:200])
        response = json_response(
            {"errorCode": "InternalServerError", "errorMessage": "internal error"}, status=500
        )
    response.headers["x-log-requestid"] = request_id
    response.headers["x-log-time"] = str(int(time.time()))
    app[METRICS].observe(api, response.status, time.perf_counter() - started)
    if close:  # a body too slow: answer, then close rather than linger over the rest of it
        response.force_close()
        await response.prepare(request)
        await response.write_eof()
        if request.transport is not None:
            request.transport.close()
    return response


async def _handle(
    request: web.Request,
    parts: tuple[str, ...],
    project: str,
    route: routes.Route | E.SlsError,
) -> web.Response:
    app = request.app
    settings = app[SETTINGS]
    headers = {k.lower(): v for k, v in request.headers.items()}
    query = {k: v for k, v in request.query.items()}
    keys = settings.access_keys
    key: auth.AccessKey | None = None
    if keys:  # from the headers alone: an unsigned or foreign request never sends us its body
        signed = auth.SignedRequest(request.method, request.path, query, headers)
        key = keys[auth.verify_head(signed, keys, time.time())]
    else:  # nothing else stops a web page of another site from writing here
        refuse_cross_site(headers)
    if isinstance(route, E.SlsError):
        raise route
    api = route.api_for(query)
    if not api.implemented:
        raise E.ParameterInvalid(
            f"loghubd serve does not implement the SLS API {api.name} "
            f"({request.method} {request.path[:200]})"
        )
    async with bodies.read_body(request, app[LIMITS], app[BUDGET]) as body:
        if keys:
            auth.verify_body(headers, body)
        target = routes.target(route, parts, body, project)
        if key is not None:  # the key's policy on the very target the handler acts on
            auth.authorize(key, api.action, routes.resource(target, key.account_id))
        service = app[SERVICE]
        if project and project == settings.default_project:
            service.ensure_project(project)
        call = Call(
            api.name, target, request.method, parts, query, headers, body, service, app[METRICS]
        )
        return await route.handler(call)


def make_app(
    service: LogService,
    settings: HttpSettings,
    *,
    metrics: ServerMetrics,
    guard: ConnectionGuard | None = None,
) -> web.Application:
    """The aiohttp application; `guard` (connection count, head timeout) if the runner
    wraps its connections in one."""
    app = web.Application()
    app[SERVICE] = service
    app[SETTINGS] = settings
    app[METRICS] = metrics
    # A compressed body is bounded again by its declared raw size (handlers.shards).
    app[LIMITS] = bodies.BodyLimits(
        service.limits.max_body_bytes + 1024 * 1024, settings.body_timeout
    )
    app[BUDGET] = bodies.BodyBudget(settings.max_inflight_body_bytes)
    app[REFUSALS] = refusals.RefusalThrottle()
    if guard is not None:
        attach(app, guard)
    metrics.watch(service)
    app.router.add_route("*", "/{tail:.*}", handle)
    return app
