"""The route table of `loghubd serve`: every SLS API it knows, one row each.

A `Route` names the request shape it matches (method, path with `*` for a variable segment,
and whether it is sent to the service host or to a project host), the handler that answers
it, the SLS API and RAM action it stands for (refined by one query parameter where SLS puts
several APIs on one path) and where each name of the resource it acts on comes from: the
`Host`, a path segment, a field of the JSON body, or "every" for a listing. The router
(`loghubd.server.api`), the access check (`loghubd.server.auth.authorize`), the metrics
labels and the README's action table all read these rows. Adding an API is one row here plus
one handler.

`target()` turns a request into the `Target` it acts on before anything else happens: names
must be strings and shard ids integers (`ParameterInvalid` otherwise). The policy evaluates
`Target.resource()` and the handlers act on the same `Target` (`Call.target`), so the resource
a policy allowed is, by construction, the one a handler touches.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from aiohttp import web

from loghubd.protocol import errors as E
from loghubd.server import policy as P
from loghubd.server.call import Call, Handler, Target, parse_body
from loghubd.server.handlers import groups, resources, shards


@dataclass(frozen=True, slots=True)
class Api:
    """One SLS API: its name (metrics label, README) and the RAM action it needs."""

    name: str
    action: str
    implemented: bool = True


@dataclass(frozen=True, slots=True)
class Name:
    """Where one name of a request's resource comes from."""

    source: Literal["none", "host", "path", "body", "every"]
    index: int = 0  # path segment
    key: str = ""  # body field
    error: type[E.SlsError] = E.ParameterInvalid  # the body is not JSON / lacks the field


NONE = Name("none")
HOST = Name("host")
EVERY = Name("every")  # a listing: the policy sees "*"
LOGSTORE = Name("path", 1)
GROUP = Name("path", 3)


def body(key: str, error: type[E.SlsError]) -> Name:
    return Name("body", key=key, error=error)


Host = Literal["project", "service"]


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    shape: tuple[str, ...]  # path segments; "*" is a variable one
    handler: Handler
    api: Api  # the API when `refine` names no variant
    refine: str = ""  # query parameter choosing among `variants`
    variants: Mapping[str, Api] = field(default_factory=dict)
    host: Host = "project"  # sent to a project host or to the service host
    project: Name = HOST
    logstore: Name = NONE
    group: Name = NONE
    shard: bool = False  # path segment 3 is a shard id

    def api_for(self, query: Mapping[str, str]) -> Api:
        if self.refine:
            return self.variants.get(query.get(self.refine, ""), self.api)
        return self.api


async def unimplemented(call: Call) -> web.Response:
    """The handler of an API loghubd does not implement (`Api.implemented` is False): the
    router refuses such a request, after the key check, before this is reached."""
    raise E.ParameterInvalid(f"{call.api} is not implemented by loghubd serve")


def _a(name: str, action: str | None = None) -> Api:
    return Api(name, action or f"log:{name}")


def _no(name: str, action: str) -> Api:
    return Api(name, action, implemented=False)


CURSOR_OR_DATA = "log:GetCursorOrData"
LS = ("logstores", "*")
SHARD = (*LS, "shards", "*")
GROUPS = (*LS, "consumergroups")
ONE_GROUP = (*GROUPS, "*")

ROUTES: tuple[Route, ...] = (
    # -- projects ------------------------------------------------------------------------
    Route("GET", (), resources.list_projects, _a("ListProject"), host="service",
          project=EVERY),
    Route("POST", (), resources.create_project, _a("CreateProject"), host="service",
          project=body("projectName", E.ParameterInvalid)),
    Route("POST", (), resources.create_project, _a("CreateProject")),
    Route("GET", (), resources.get_project, _a("GetProject")),
    Route("PUT", (), resources.update_project, _a("UpdateProject")),
    Route("DELETE", (), resources.delete_project, _a("DeleteProject")),
    # -- logstores -----------------------------------------------------------------------
    Route("POST", ("logstores",), resources.create_logstore, _a("CreateLogStore"),
          logstore=body("logstoreName", E.LogStoreInfoInvalid)),
    Route("GET", ("logstores",), resources.list_logstores, _a("ListLogStores"),
          logstore=EVERY),
    Route("GET", LS, resources.get_logstore, _a("GetLogStore"), refine="type",
          variants={"log": _no("GetLogs", "log:GetLogStoreLogs"),
                    "histogram": _no("GetHistograms", "log:GetLogStoreHistogram")},
          logstore=LOGSTORE),
    Route("PUT", LS, resources.update_logstore, _a("UpdateLogStore"), logstore=LOGSTORE),
    Route("DELETE", LS, resources.delete_logstore, _a("DeleteLogStore"), logstore=LOGSTORE),
    Route("POST", (*LS, "logs"), unimplemented, _no("GetLogsV2", "log:GetLogStoreLogs"),
          logstore=LOGSTORE),
    Route("GET", (*LS, "index"), unimplemented, _no("GetIndex", "log:GetIndex"),
          logstore=LOGSTORE),
    Route("POST", (*LS, "index"), unimplemented, _no("CreateIndex", "log:CreateIndex"),
          logstore=LOGSTORE),
    Route("GET", ("logs",), unimplemented, _no("GetProjectLogs", "log:GetProjectQuery")),
    # -- shards and data -----------------------------------------------------------------
    Route("GET", (*LS, "shards"), shards.list_shards, _a("ListShards"), logstore=LOGSTORE),
    Route("POST", (*LS, "shards", "lb"), shards.put_logs,
          _a("PutLogs", "log:PostLogStoreLogs"), logstore=LOGSTORE),
    Route("POST", (*LS, "shards", "route"), shards.put_logs,
          _a("PutLogs", "log:PostLogStoreLogs"), logstore=LOGSTORE),
    Route("GET", SHARD, shards.shard_get, _a("GetShard", CURSOR_OR_DATA), refine="type",
          variants={"cursor": _a("GetCursor", CURSOR_OR_DATA),
                    "cursor_time": _a("GetCursorTime", CURSOR_OR_DATA),
                    "log": _a("PullLogs", CURSOR_OR_DATA),
                    "logs": _a("PullLogs", CURSOR_OR_DATA)},
          logstore=LOGSTORE, shard=True),
    Route("POST", SHARD, shards.shard_post, _a("SplitOrMergeShard", "log:SplitShard"),
          refine="action",
          variants={"split": _a("SplitShard"), "merge": _a("MergeShard")},
          logstore=LOGSTORE, shard=True),
    Route("DELETE", SHARD, shards.delete_shard, _a("DeleteShard"), logstore=LOGSTORE,
          shard=True),
    # -- consumer groups -----------------------------------------------------------------
    Route("POST", GROUPS, groups.create_group, _a("CreateConsumerGroup"), logstore=LOGSTORE,
          group=body("consumerGroup", E.JsonInfoInvalid)),
    Route("GET", GROUPS, groups.list_groups, _a("ListConsumerGroup"), logstore=LOGSTORE,
          group=EVERY),
    Route("PUT", ONE_GROUP, groups.update_group, _a("UpdateConsumerGroup"), logstore=LOGSTORE,
          group=GROUP),
    Route("DELETE", ONE_GROUP, groups.delete_group, _a("DeleteConsumerGroup"),
          logstore=LOGSTORE, group=GROUP),
    Route("POST", ONE_GROUP, groups.group_post,
          _a("ConsumerGroupPost", "log:ConsumerGroupUpdateCheckPoint"), refine="type",
          variants={"heartbeat": _a("ConsumerGroupHeartBeat"),
                    "checkpoint": _a("ConsumerGroupUpdateCheckPoint"),
                    # loghubd extension: a consumer's last heartbeat
                    "leave": _a("ConsumerGroupLeave", "log:ConsumerGroupHeartBeat")},
          logstore=LOGSTORE, group=GROUP),
    Route("GET", ONE_GROUP, groups.group_get,
          _a("GetCheckPoint", "log:GetConsumerGroupCheckPoint"), refine="type",
          # loghubd extension: checkpoints plus owners (`loghubd status`)
          variants={"status": _a("GetConsumerGroupStatus", "log:GetConsumerGroupCheckPoint")},
          logstore=LOGSTORE, group=GROUP),
)  # fmt: skip


def every_api() -> dict[str, Api]:
    """Every API of the table by name (variants included), implemented or not."""
    out: dict[str, Api] = {}
    for r in ROUTES:
        for api in (r.api, *r.variants.values()):
            out.setdefault(api.name, api)
    return out


# SLS API name → RAM action, of the APIs `loghubd serve` implements (the README's table).
API_ACTIONS: Mapping[str, str] = {n: a.action for n, a in every_api().items() if a.implemented}


def _matches(shape: tuple[str, ...], parts: tuple[str, ...]) -> bool:
    if len(shape) != len(parts):
        return False
    return all(s in ("*", p) for s, p in zip(shape, parts, strict=True))


def resolve(method: str, parts: tuple[str, ...], host: Host = "project") -> Route:
    """The route of a request: the most specific shape (fewest `*`) that matches its path,
    on its kind of host; `MethodNotAllowed` when only the method is wrong."""
    shaped = [r for r in ROUTES if _matches(r.shape, parts)]
    if shaped:
        best = min(r.shape.count("*") for r in shaped)
        shaped = [r for r in shaped if r.shape.count("*") == best]
    on_host = [r for r in shaped if r.method == method]
    for r in on_host:
        if r.host == host:
            return r
    if on_host:  # the API exists for the other kind of host
        return on_host[0]
    if shaped:
        raise E.MethodNotAllowed(f"{method} is not allowed on this resource")
    raise E.ParameterInvalid(
        f"no such API: {method} /{'/'.join(parts)[:200]} is not an SLS API loghubd serve knows"
    )


def _body_field(body: bytes, name: Name) -> str:
    data = parse_body(body, name.error)
    if not isinstance(data, dict) or name.key not in data:
        raise name.error(f"body must be a JSON object with {name.key}")
    return _string(data[name.key], name.key)


def _string(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise E.ParameterInvalid(f"{what} must be a string, not {type(value).__name__}")
    if not value:
        raise E.ParameterInvalid(f"{what} must not be empty")
    return value


def _name(name: Name, parts: tuple[str, ...], body: bytes, host_project: str) -> str | None:
    if name.source == "none":
        return None
    if name.source == "every":
        return "*"
    if name.source == "host":
        return host_project
    if name.source == "path":
        return _string(parts[name.index], "the name in the path")
    return _body_field(body, name)


def target(route: Route, parts: tuple[str, ...], body: bytes, host_project: str) -> Target:
    """What the request acts on, its names checked to their types: before any other step."""
    if route.project.source == "host" and not host_project:
        raise E.ProjectNotExist("no project in the Host header and no --default-project")
    project = _name(route.project, parts, body, host_project)
    assert project is not None
    shard = None
    if route.shard:
        try:
            shard = int(parts[3])
        except ValueError:
            raise E.ParameterInvalid(f"shard must be an integer: {parts[3][:64]!r}") from None
    return Target(
        project,
        _name(route.logstore, parts, body, host_project),
        _name(route.group, parts, body, host_project),
        shard,
    )


def resource(t: Target, account: str) -> str:
    """The RAM resource of a target: `acs:log:local:<account>:project/<p>[/logstore/<l>
    [/consumergroup/<g>]]`."""
    return P.resource(account, t.project, t.logstore, t.group)
