"""HTTP face of `loghubd serve`: SLS requests in, `LogService` calls, SLS answers out.

Every answer carries `x-log-requestid`; every failure is `{"errorCode", "errorMessage"}` with
the status of PROTOCOL.md §15. Nothing a client sends can produce a 5xx: decoding problems
are 4xx SLS errors, and an unexpected exception is logged and answered 500 (a bug to fix).
The project comes from the first label of the `Host` header; absolute-form request targets
(an unmodified SDK behind `HTTP_PROXY`) work because aiohttp parses them into the same path.
"""

from __future__ import annotations

import ipaddress
import time
import uuid
from collections.abc import Mapping

import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from loghubd.protocol import errors as E
from loghubd.server import auth
from loghubd.server.call import Call, Handler, json_response
from loghubd.server.handlers import groups, resources, shards
from loghubd.server.metrics import ServerMetrics
from loghubd.server.service import LogService

log = structlog.get_logger("loghubd.server")

SERVICE = web.AppKey("service", LogService)
KEYS = web.AppKey("access_keys", dict)
DEFAULT_PROJECT = web.AppKey("default_project", str)
METRICS = web.AppKey("metrics", ServerMetrics)


def project_from_host(host: str, default_project: str) -> str:
    """First label of Host (port stripped); bare hosts (IP, single label) → default project."""
    name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    name = name.strip("[]")
    try:
        ipaddress.ip_address(name)
        return default_project
    except ValueError:
        pass
    if "." not in name:
        return default_project
    return name.split(".", 1)[0]


# -- routing --------------------------------------------------------------------------------

# (method, path shape) → (API name, handler). Shapes use "*" for a variable segment.
ROUTES: dict[tuple[str, tuple[str, ...]], tuple[str, Handler]] = {
    ("POST", ()): ("CreateProject", resources.create_project),
    ("GET", ()): ("GetProject", resources.get_project),
    ("PUT", ()): ("UpdateProject", resources.update_project),
    ("DELETE", ()): ("DeleteProject", resources.delete_project),
    ("POST", ("logstores",)): ("CreateLogStore", resources.create_logstore),
    ("GET", ("logstores",)): ("ListLogStores", resources.list_logstores),
    ("GET", ("logstores", "*")): ("GetLogStore", resources.get_logstore),
    ("PUT", ("logstores", "*")): ("UpdateLogStore", resources.update_logstore),
    ("DELETE", ("logstores", "*")): ("DeleteLogStore", resources.delete_logstore),
    ("GET", ("logstores", "*", "shards")): ("ListShards", shards.list_shards),
    ("POST", ("logstores", "*", "shards", "lb")): ("PutLogs", shards.put_logs),
    ("POST", ("logstores", "*", "shards", "route")): ("PutLogs", shards.put_logs),
    ("GET", ("logstores", "*", "shards", "*")): ("GetShard", shards.shard_get),
    ("POST", ("logstores", "*", "shards", "*")): ("SplitOrMergeShard", shards.shard_post),
    ("DELETE", ("logstores", "*", "shards", "*")): ("DeleteShard", shards.delete_shard),
    ("POST", ("logstores", "*", "consumergroups")): ("CreateConsumerGroup", groups.create_group),
    ("GET", ("logstores", "*", "consumergroups")): ("ListConsumerGroup", groups.list_groups),
    ("PUT", ("logstores", "*", "consumergroups", "*")): (
        "UpdateConsumerGroup",
        groups.update_group,
    ),
    ("DELETE", ("logstores", "*", "consumergroups", "*")): (
        "DeleteConsumerGroup",
        groups.delete_group,
    ),
    ("POST", ("logstores", "*", "consumergroups", "*")): ("ConsumerGroupPost", groups.group_post),
    ("GET", ("logstores", "*", "consumergroups", "*")): ("GetCheckPoint", groups.group_get),
}


def _shape(parts: tuple[str, ...]) -> tuple[str, ...]:
    fixed = {0: "logstores", 2: ("shards", "consumergroups")}
    out = []
    for i, p in enumerate(parts):
        want = fixed.get(i)
        if i == 3 and parts[2] == "shards" and p in ("lb", "route"):
            out.append(p)
        elif want is None:
            out.append("*")
        else:
            out.append(p)
    return tuple(out)


def resolve(method: str, parts: tuple[str, ...]) -> tuple[str, Handler]:
    shape = _shape(parts)
    route = ROUTES.get((method, shape))
    if route is not None:
        return route
    if any(shape == s for (_m, s) in ROUTES):
        raise E.MethodNotAllowed(f"{method} is not allowed on this resource")
    raise E.ParameterInvalid(f"no such API: {method} /{'/'.join(parts)[:200]}")


# Routes whose SLS API depends on a query parameter, for metric labels.
_BY_QUERY = {
    "GetShard": (
        "type",
        {
            "cursor": "GetCursor",
            "cursor_time": "GetCursorTime",
            "log": "PullLogs",
            "logs": "PullLogs",
        },
    ),
    "ConsumerGroupPost": (
        "type",
        {
            "heartbeat": "ConsumerGroupHeartBeat",
            "checkpoint": "ConsumerGroupUpdateCheckPoint",
            "leave": "ConsumerGroupLeave",
        },
    ),
    "SplitOrMergeShard": ("action", {"split": "SplitShard", "merge": "MergeShard"}),
}


def _api_name(route: tuple[str, Handler] | E.SlsError, query: Mapping[str, str]) -> str:
    """The metric label of a request: the route's API, refined by its query parameter."""
    if isinstance(route, E.SlsError):
        return "Unknown"
    name = route[0]
    refine = _BY_QUERY.get(name)
    if refine is not None:
        key, names = refine
        return names.get(query.get(key, ""), name)
    return name


async def handle(request: web.Request) -> web.StreamResponse:
    app = request.app
    service = app[SERVICE]
    if request.path == "/metrics" and request.method == "GET":
        data = generate_latest(app[METRICS].exposed)
        return web.Response(body=data, headers={"content-type": CONTENT_TYPE_LATEST})
    request_id = uuid.uuid4().hex[:24].upper()
    parts = tuple(p for p in request.path.split("/") if p)
    route: tuple[str, Handler] | E.SlsError
    try:
        route = resolve(request.method, parts)
    except E.SlsError as exc:  # answered below, like any other refusal
        route = exc
    api = _api_name(route, request.query)
    started = time.perf_counter()
    try:
        response = await _handle(request, service, parts, route)
    except E.SlsError as exc:
        response = json_response(
            {"errorCode": exc.error_code, "errorMessage": exc.message}, status=exc.http_status
        )
    except web.HTTPRequestEntityTooLarge:
        err = E.PostBodyTooLarge("request body is too large")
        response = json_response(
            {"errorCode": err.error_code, "errorMessage": err.message}, status=400
        )
    except Exception:
        log.exception("request_failed", api=api, path=request.path[:200])
        response = json_response(
            {"errorCode": "InternalServerError", "errorMessage": "internal error"}, status=500
        )
    response.headers["x-log-requestid"] = request_id
    response.headers["x-log-time"] = str(int(time.time()))
    app[METRICS].observe(api, response.status, time.perf_counter() - started)
    return response


async def _handle(
    request: web.Request,
    service: LogService,
    parts: tuple[str, ...],
    resolved: tuple[str, Handler] | E.SlsError,
) -> web.Response:
    if isinstance(resolved, E.SlsError):
        raise resolved
    route, handler = resolved
    try:
        body = await request.read()
    except ConnectionResetError:  # the client went away mid-body: its error, not ours
        raise E.PostBodyInvalid("the request body is incomplete: the connection was lost") from None
    headers = {k.lower(): v for k, v in request.headers.items()}
    query = {k: v for k, v in request.query.items()}
    keys = request.app[KEYS]
    key_id = ""
    if keys:
        key_id = auth.verify(
            auth.SignedRequest(request.method, request.path, query, headers, body),
            keys,
            time.time(),
        )
    host = headers.get("host", "")
    project = project_from_host(host, request.app[DEFAULT_PROJECT])
    if not project and (parts or request.method != "GET"):
        raise E.ProjectNotExist("no project in the Host header and no --default-project")
    if key_id:  # the key's policy (RAM actions on acs:log resources), before any effect
        auth.authorize(keys[key_id], route, parts, query, body, project)
    if project and project == request.app[DEFAULT_PROJECT]:
        service.ensure_project(project)
    call = Call(request.method, parts, query, headers, body, project, service, request.app[METRICS])
    return await handler(call)


def make_app(
    service: LogService,
    *,
    access_keys: Mapping[str, auth.AccessKey],
    default_project: str,
    metrics: ServerMetrics,
) -> web.Application:
    # Bodies over the limit are refused by aiohttp before they are read; we answer them with
    # the SLS code. Compressed bodies are bounded again by their declared raw size.
    app = web.Application(client_max_size=service.limits.max_body_bytes + 1024 * 1024)
    app[SERVICE] = service
    app[KEYS] = dict(access_keys)
    app[DEFAULT_PROJECT] = default_project
    app[METRICS] = metrics
    metrics.watch(service)
    app.router.add_route("*", "/{tail:.*}", handle)
    return app
