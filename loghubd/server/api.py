"""HTTP face of `loghubd serve`: SLS requests in, `LogService` calls, SLS answers out.

Every answer carries `x-log-requestid`; every failure is `{"errorCode", "errorMessage"}` with
the status of PROTOCOL.md §15. Nothing a client sends can produce a 5xx: decoding problems
are 4xx SLS errors, and an unexpected exception is logged and answered 500 (a bug to fix).
The project comes from the first label of the `Host` header; absolute-form request targets
(an unmodified SDK behind `HTTP_PROXY`) work because aiohttp parses them into the same path.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from loghubd.protocol import compress as codec
from loghubd.protocol import errors as E
from loghubd.protocol import pb
from loghubd.server import auth, spl, spl_groups
from loghubd.server.metrics import ServerMetrics
from loghubd.server.service import LogService
from loghubd.server.storage import Shard

log = structlog.get_logger("loghubd.server")

SERVICE = web.AppKey("service", LogService)
KEYS = web.AppKey("access_keys", dict)
DEFAULT_PROJECT = web.AppKey("default_project", str)
METRICS = web.AppKey("metrics", ServerMetrics)


@dataclass(frozen=True, slots=True)
class Call:
    """One parsed request: what the handlers see."""

    method: str
    parts: tuple[str, ...]  # path segments
    query: Mapping[str, str]
    headers: Mapping[str, str]  # lower-case names
    body: bytes
    project: str
    service: LogService
    metrics: ServerMetrics


Handler = Callable[[Call], Awaitable[web.Response]]


def _json(value: object, status: int = 200) -> web.Response:
    return web.Response(
        status=status, body=json.dumps(value).encode(), content_type="application/json"
    )


def _empty() -> web.Response:
    return web.Response(status=200, body=b"")


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


def _int(value: str | None, name: str, *, default: int | None = None) -> int:
    if value is None or value == "":
        if default is None:
            raise E.ParameterInvalid(f"{name} is required")
        return default
    try:
        return int(value)
    except ValueError:
        raise E.ParameterInvalid(f"{name} must be an integer: {value[:64]!r}") from None


def _body_json(call: Call, error: type[E.SlsError]) -> Any:
    try:
        return json.loads(call.body.decode("utf-8")) if call.body else None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise error(f"body is not valid JSON: {exc}") from None


def _bool(value: object) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return None


MAX_GROUP_TIMEOUT_S = 2**31 - 1


def _seconds(value: object) -> int | None:
    """A group timeout: an integer, or an integral float (the Python SDK sends
    `heartbeat_interval * 2`, e.g. 4.0); anything else is None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and value <= MAX_GROUP_TIMEOUT_S:  # beyond: SQLite cannot hold it
        return value
    return None


def _shard_json(s: Shard) -> dict[str, object]:
    return {
        "shardID": s.shard_id,
        "status": "readonly" if s.readonly else "readwrite",
        "inclusiveBeginKey": s.begin_key,
        "exclusiveEndKey": s.end_key,
        "createTime": s.create_time,
        # loghubd extension: the shards this one was split or merged from (SDKs ignore it).
        "parents": list(s.parents),
    }


# -- projects -------------------------------------------------------------------------------


async def create_project(call: Call) -> web.Response:
    data = _body_json(call, E.ParameterInvalid) or {}
    if not isinstance(data, dict):
        raise E.ParameterInvalid("body must be a JSON object")
    name = call.project or str(data.get("projectName", ""))
    call.service.create_project(name, str(data.get("description", "")))
    return _empty()


async def get_project(call: Call) -> web.Response:
    if not call.project:
        projects = call.service.storage.list_projects()
        return _json(
            {
                "count": len(projects),
                "total": len(projects),
                "projects": [
                    {
                        "projectName": p.name,
                        "description": p.description,
                        "status": "Normal",
                        "region": "local",
                    }
                    for p in projects
                ],
            }
        )
    call.service.project(call.project)
    p = call.service.storage.get_project(call.project)
    assert p is not None
    return _json(
        {
            "projectName": p.name,
            "description": p.description,
            "status": "Normal",
            "region": "local",
            "owner": "loghubd",
            "createTime": str(p.create_time),
            "lastModifyTime": str(p.last_modify_time),
        }
    )


async def update_project(call: Call) -> web.Response:
    call.service.project(call.project)
    data = _body_json(call, E.ParameterInvalid)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise E.ParameterInvalid("body must be a JSON object")
    call.service.storage.update_project(
        call.project, str(data.get("description", "")), int(time.time())
    )
    return _empty()


async def delete_project(call: Call) -> web.Response:
    call.service.delete_project(call.project)
    return _empty()


# -- logstores ------------------------------------------------------------------------------


async def create_logstore(call: Call) -> web.Response:
    data = _body_json(call, E.LogStoreInfoInvalid)
    if not isinstance(data, dict):
        raise E.LogStoreInfoInvalid("body must be a JSON object")
    try:
        name = str(data["logstoreName"])
        ttl = int(data.get("ttl", 30))
        shards = int(data.get("shardCount", 2))
    except (KeyError, TypeError, ValueError) as exc:
        raise E.LogStoreInfoInvalid(f"invalid logstore definition: {exc}") from None
    call.service.create_logstore(call.project, name, ttl, shards)
    return _empty()


async def list_logstores(call: Call) -> web.Response:
    call.service.project(call.project)
    offset = _int(call.query.get("offset"), "offset", default=0)
    size = _int(call.query.get("size"), "size", default=100)
    pattern = call.query.get("logstoreName", "")
    names = [
        ls.name for ls in call.service.storage.list_logstores(call.project) if pattern in ls.name
    ]
    page = names[offset : offset + size] if size >= 0 else names[offset:]
    return _json({"count": len(page), "total": len(names), "logstores": page})


async def get_logstore(call: Call) -> web.Response:
    ls = call.service.logstore(call.project, call.parts[1])
    shards = call.service.storage.list_shards(ls.id)
    return _json(
        {
            "logstoreName": ls.name,
            "ttl": ls.ttl,
            "shardCount": sum(1 for s in shards if not s.readonly),
            "enable_tracking": False,
            "appendMeta": False,
            "autoSplit": False,
            "maxSplitShard": 64,
            "createTime": ls.create_time,
            "lastModifyTime": ls.last_modify_time,
        }
    )


async def update_logstore(call: Call) -> web.Response:
    ls = call.service.logstore(call.project, call.parts[1])
    data = _body_json(call, E.LogStoreInfoInvalid)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise E.LogStoreInfoInvalid("body must be a JSON object")
    try:
        ttl = int(data.get("ttl", ls.ttl))
    except (TypeError, ValueError):
        raise E.LogStoreInfoInvalid("ttl must be an integer") from None
    if not 1 <= ttl <= 3650:  # as at creation; ttl <= 0 would expire every stored log
        raise E.LogStoreInfoInvalid("ttl must be within [1, 3650] days")
    call.service.storage.update_logstore(ls.id, ttl, int(time.time()))
    return _empty()


async def delete_logstore(call: Call) -> web.Response:
    call.service.delete_logstore(call.project, call.parts[1])
    return _empty()


# -- shards and data ------------------------------------------------------------------------


async def list_shards(call: Call) -> web.Response:
    ls = call.service.logstore(call.project, call.parts[1])
    return _json([_shard_json(s) for s in call.service.shards(ls)])


def _decoded_body(call: Call) -> bytes:
    ctype = call.headers.get("x-log-compresstype", "").lower()
    limit = call.service.limits.max_body_bytes
    if ctype not in codec.SUPPORTED:
        raise E.InvalidCompressType(f"compress type {ctype[:32]!r} is not supported")
    if not ctype:
        if len(call.body) > limit:
            raise E.PostBodyTooLarge(f"body exceeds {limit} bytes")
        return call.body
    raw = call.headers.get("x-log-bodyrawsize")
    if raw is None:
        raise E.MissingBodyRawSize("x-log-bodyrawsize is required with x-log-compresstype")
    try:
        raw_size = int(raw)
    except ValueError:
        raise E.InvalidBodyRawSize(f"x-log-bodyrawsize {raw[:32]!r} is not an integer") from None
    if raw_size < 0:
        raise E.InvalidBodyRawSize("x-log-bodyrawsize must not be negative")
    if raw_size > limit:
        raise E.PostBodyTooLarge(f"raw body of {raw_size} bytes exceeds {limit}")
    try:
        return codec.decompress(ctype, call.body, raw_size)
    except codec.CompressionError as exc:
        raise E.PostBodyUncompressError(str(exc)) from None


async def put_logs(call: Call) -> web.Response:
    ls = call.service.logstore(call.project, call.parts[1])
    raw = _decoded_body(call)
    key = call.query.get("key") if call.parts[3] == "route" else None
    if call.parts[3] == "route" and key is None:
        raise E.ParameterInvalid("key is required to route by hash")
    logs = call.service.put(ls, raw, key)
    call.metrics.ingest_logs.labels(ls.project, ls.name).inc(logs)
    call.metrics.ingest_bytes.labels(ls.project, ls.name).inc(len(raw))
    return _empty()


async def shard_get(call: Call) -> web.Response:
    ls = call.service.logstore(call.project, call.parts[1])
    shard_id = _int(call.parts[3], "shard")
    kind = call.query.get("type", "")
    if kind == "cursor":
        return _json({"cursor": call.service.cursor(ls, shard_id, call.query.get("from", ""))})
    if kind == "cursor_time":
        cur = call.query.get("cursor", "")
        return _json({"cursor_time": call.service.cursor_time(ls, shard_id, cur)})
    if kind in ("log", "logs"):
        return await pull_logs(call, ls, shard_id)
    raise E.ParameterInvalid(f"type must be cursor, cursor_time, log or logs, not {kind[:32]!r}")


def _spl_program(text: str) -> spl.Program | None:
    """The compiled `query` of a pull (None: no query). Statements outside the supported
    subset are ParameterInvalid, with the position and the reason."""
    if not text.strip():
        return None
    try:
        return spl.compile(text)
    except spl.SplError as exc:
        raise E.ParameterInvalid(f"invalid SPL query: {exc}") from None


async def pull_logs(call: Call, ls: Any, shard_id: int) -> web.Response:
    count = _int(call.query.get("count"), "count", default=1000)
    if not 0 <= count <= 1000:
        raise E.ParameterInvalid("count must be within [0, 1000]")
    cursor = call.query.get("cursor")
    if not cursor:
        raise E.InvalidCursor("cursor is required")
    if call.query.get("processor"):
        raise E.NotSupported("consume processors are not supported; pass the SPL as query")
    program = _spl_program(call.query.get("query", ""))  # pullMode is accepted and ignored
    result = call.service.pull(ls, shard_id, cursor, count, call.query.get("end_cursor") or None)
    groups = result.groups
    lines: dict[str, str] = {}
    if program is not None:
        # Decoding and evaluating is CPU work: off the event loop (heartbeats keep flowing).
        filtered = await asyncio.to_thread(spl_groups.apply, program, result.groups)
        groups = filtered.groups
        lines = {
            "x-log-rawdatalines": str(filtered.raw_lines),
            "x-log-resultlines": str(filtered.result_lines),
            "x-log-failedlines": str(filtered.failed_lines),
        }
    payload = pb.frame_log_groups(groups)
    ctype = codec.pick_response_codec(call.headers.get("accept-encoding"))
    body = codec.compress(ctype, payload) if payload else b""
    headers = {
        "x-log-cursor": result.cursor,  # past every scanned group, also those filtered out
        "x-log-count": str(len(groups)),
        "x-log-bodyrawsize": str(len(payload)),
        "x-log-rawdatacount": str(len(result.groups)),  # before the query
        "x-log-rawdatasize": str(spl_groups.framed_size(result.groups)),
        **lines,
        "x-log-read-last-cursor": result.last_cursor,
        "x-log-end-of-cursor": "1" if result.end_of_cursor else "0",
        "content-type": "application/x-protobuf",
    }
    if payload and ctype:
        headers["x-log-compresstype"] = ctype
    return web.Response(status=200, body=body, headers=headers)


async def shard_post(call: Call) -> web.Response:
    ls = call.service.logstore(call.project, call.parts[1])
    shard_id = _int(call.parts[3], "shard")
    action = call.query.get("action", "")
    if action == "split":
        result = call.service.split(ls, shard_id, call.query.get("key", ""))
    elif action == "merge":
        result = call.service.merge(ls, shard_id)
    else:
        raise E.ParameterInvalid(f"action must be split or merge, not {action[:32]!r}")
    return _json([_shard_json(s) for s in result])


async def delete_shard(call: Call) -> web.Response:
    ls = call.service.logstore(call.project, call.parts[1])
    call.service.delete_shard(ls, _int(call.parts[3], "shard"))
    return _empty()


# -- consumer groups ------------------------------------------------------------------------


async def create_group(call: Call) -> web.Response:
    ls = call.service.logstore(call.project, call.parts[1])
    data = _body_json(call, E.JsonInfoInvalid)
    if not isinstance(data, dict) or not isinstance(data.get("consumerGroup"), str):
        raise E.JsonInfoInvalid("body must be {consumerGroup, timeout, order}")
    timeout, order = _seconds(data.get("timeout")), _bool(data.get("order", False))
    if timeout is None or order is None:
        raise E.JsonInfoInvalid("timeout must be a whole number of seconds and order a boolean")
    call.service.create_group(ls, data["consumerGroup"], timeout, order)
    return _empty()


async def list_groups(call: Call) -> web.Response:
    ls = call.service.logstore(call.project, call.parts[1])
    groups = call.service.list_groups(ls)
    return _json([{"name": g.name, "timeout": int(g.timeout), "order": g.order} for g in groups])


async def update_group(call: Call) -> web.Response:
    ls = call.service.logstore(call.project, call.parts[1])
    data = _body_json(call, E.JsonInfoInvalid)
    if not isinstance(data, dict) or not ({"timeout", "order"} & set(data)):
        raise E.JsonInfoInvalid("body must hold timeout and/or order")
    timeout = _seconds(data["timeout"]) if "timeout" in data else None
    order = _bool(data["order"]) if "order" in data else None
    if ("timeout" in data and timeout is None) or ("order" in data and order is None):
        raise E.JsonInfoInvalid("timeout must be a whole number of seconds and order a boolean")
    call.service.update_group(ls, call.parts[3], timeout, order)
    return _empty()


async def delete_group(call: Call) -> web.Response:
    ls = call.service.logstore(call.project, call.parts[1])
    call.service.delete_group(ls, call.parts[3])
    return _empty()


async def group_post(call: Call) -> web.Response:
    ls = call.service.logstore(call.project, call.parts[1])
    group, kind = call.parts[3], call.query.get("type", "")
    consumer = call.query.get("consumer", "")
    if kind == "heartbeat":
        held = _body_json(call, E.JsonInfoInvalid)
        if held is None:
            held = []
        if not isinstance(held, list) or not all(
            isinstance(s, int) and not isinstance(s, bool) for s in held
        ):
            raise E.JsonInfoInvalid("heartbeat body must be a JSON array of shard ids")
        if not consumer:
            raise E.ParameterInvalid("consumer is required")
        # loghubd extension: `shards=0,1,5`, the only shards this consumer may be given.
        allowed = _shard_list(call.query.get("shards", ""))
        return _json(call.service.heartbeat(ls, group, consumer, held, allowed))
    if kind == "checkpoint":
        data = _body_json(call, E.JsonInfoInvalid)
        if (
            not isinstance(data, dict)
            or not isinstance(data.get("shard"), int)
            or not isinstance(data.get("checkpoint"), str)
        ):
            raise E.JsonInfoInvalid("checkpoint body must be {shard: int, checkpoint: str}")
        force = _bool(call.query.get("forceSuccess", "false"))
        if force is None:
            raise E.ParameterInvalid("forceSuccess must be true or false")
        if not consumer and not force:
            raise E.ParameterInvalid("consumer is required unless forceSuccess is true")
        call.service.commit(ls, group, consumer, data["shard"], data["checkpoint"], force)
        return _empty()
    if kind == "leave":  # loghubd extension: hand every shard back at once
        if not consumer:
            raise E.ParameterInvalid("consumer is required")
        call.service.leave(ls, group, consumer)
        return _empty()
    raise E.ParameterInvalid(f"type must be heartbeat, checkpoint or leave, not {kind[:32]!r}")


async def group_get(call: Call) -> web.Response:
    ls = call.service.logstore(call.project, call.parts[1])
    group = call.parts[3]
    if call.query.get("type") == "status":  # loghubd extension, for `loghubd status`
        return _json(_group_status(call.service, ls, group))
    shard = call.query.get("shard")
    shard_id = None if shard in (None, "") else _int(shard, "shard")
    return _json(call.service.checkpoints(ls, group, shard_id))


def _shard_list(text: str) -> frozenset[int] | None:
    if not text:
        return None
    try:
        shards = frozenset(int(part) for part in text.split(","))
    except ValueError:
        raise E.ParameterInvalid("shards must be comma-separated shard ids") from None
    if any(s < 0 for s in shards):
        raise E.ParameterInvalid("shards must be comma-separated shard ids")
    return shards


def _group_status(service: LogService, ls: Any, name: str) -> dict[str, object]:
    group = service.group_view(ls, name)
    shards = {s.shard_id: s for s in service.storage.list_shards(ls.id)}
    cps = {c["shard"]: c for c in service.checkpoints(ls, name, None)}
    out = []
    for sid, entry in sorted(group.shards.items()):
        s = shards.get(sid)
        out.append(
            {
                "shard": sid,
                "state": entry.state.value,
                "owner": entry.owner or "",
                "next": entry.next or "",
                "readonly": bool(s and s.readonly),
                "checkpoint": cps.get(sid, {}).get("checkpoint", ""),
                "checkpointConsumer": cps.get(sid, {}).get("consumer", ""),
                "endCursorSeq": s.next_seq if s else None,
                "beginCursorSeq": s.min_seq if s else None,
            }
        )
    return {
        "name": group.name,
        "timeout": group.timeout,
        "order": group.order,
        "consumers": sorted(group.consumers),
        "shards": out,
        # loghubd extension: consumers' shard allow-lists (heartbeat `shards=`)
        "allowed": {c: sorted(s) for c, s in sorted(group.allowed.items())},
    }


# -- routing --------------------------------------------------------------------------------

# (method, path shape) → (API name, handler). Shapes use "*" for a variable segment.
ROUTES: dict[tuple[str, tuple[str, ...]], tuple[str, Handler]] = {
    ("POST", ()): ("CreateProject", create_project),
    ("GET", ()): ("GetProject", get_project),
    ("PUT", ()): ("UpdateProject", update_project),
    ("DELETE", ()): ("DeleteProject", delete_project),
    ("POST", ("logstores",)): ("CreateLogStore", create_logstore),
    ("GET", ("logstores",)): ("ListLogStores", list_logstores),
    ("GET", ("logstores", "*")): ("GetLogStore", get_logstore),
    ("PUT", ("logstores", "*")): ("UpdateLogStore", update_logstore),
    ("DELETE", ("logstores", "*")): ("DeleteLogStore", delete_logstore),
    ("GET", ("logstores", "*", "shards")): ("ListShards", list_shards),
    ("POST", ("logstores", "*", "shards", "lb")): ("PutLogs", put_logs),
    ("POST", ("logstores", "*", "shards", "route")): ("PutLogs", put_logs),
    ("GET", ("logstores", "*", "shards", "*")): ("GetShard", shard_get),
    ("POST", ("logstores", "*", "shards", "*")): ("SplitOrMergeShard", shard_post),
    ("DELETE", ("logstores", "*", "shards", "*")): ("DeleteShard", delete_shard),
    ("POST", ("logstores", "*", "consumergroups")): ("CreateConsumerGroup", create_group),
    ("GET", ("logstores", "*", "consumergroups")): ("ListConsumerGroup", list_groups),
    ("PUT", ("logstores", "*", "consumergroups", "*")): ("UpdateConsumerGroup", update_group),
    ("DELETE", ("logstores", "*", "consumergroups", "*")): ("DeleteConsumerGroup", delete_group),
    ("POST", ("logstores", "*", "consumergroups", "*")): ("ConsumerGroupPost", group_post),
    ("GET", ("logstores", "*", "consumergroups", "*")): ("GetCheckPoint", group_get),
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
        data = generate_latest(app[METRICS].registry)
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
        response = _json(
            {"errorCode": exc.error_code, "errorMessage": exc.message}, status=exc.http_status
        )
    except web.HTTPRequestEntityTooLarge:
        err = E.PostBodyTooLarge("request body is too large")
        response = _json({"errorCode": err.error_code, "errorMessage": err.message}, status=400)
    except Exception:
        log.exception("request_failed", api=api, path=request.path[:200])
        response = _json(
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
