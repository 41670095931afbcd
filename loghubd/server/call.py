"""What every handler of `loghubd serve`'s HTTP API shares: the parsed request (`Call`),
the answers, and the parsing of request values into SLS errors (`loghubd.server.api` routes
requests to the handlers in `loghubd.server.handlers`)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from loghubd.protocol import errors as E
from loghubd.server.metrics import ServerMetrics
from loghubd.server.service import LogService
from loghubd.server.storage import Shard


@dataclass(frozen=True, slots=True)
class Target:
    """What a request acts on, its names checked to their types (`routes.target`): the
    resource the policy evaluates and the handler touches. `"*"`: every one (a listing)."""

    project: str
    logstore: str | None = None
    group: str | None = None
    shard: int | None = None

    @property
    def ls(self) -> str:
        assert self.logstore is not None, "a route without a logstore name"
        return self.logstore

    @property
    def cg(self) -> str:
        assert self.group is not None, "a route without a consumer group name"
        return self.group

    @property
    def shard_id(self) -> int:
        assert self.shard is not None, "a route without a shard id"
        return self.shard


@dataclass(frozen=True, slots=True)
class Call:
    """One parsed request: what the handlers see."""

    api: str  # the SLS API name (routes.Api.name)
    target: Target
    method: str
    parts: tuple[str, ...]  # path segments
    query: Mapping[str, str]
    headers: Mapping[str, str]  # lower-case names
    body: bytes
    service: LogService
    metrics: ServerMetrics


Handler = Callable[[Call], Awaitable[web.Response]]


def json_response(value: object, status: int = 200) -> web.Response:
    return web.Response(
        status=status, body=json.dumps(value).encode(), content_type="application/json"
    )


def empty_response() -> web.Response:
    return web.Response(status=200, body=b"")


def int_param(value: str | None, name: str, *, default: int | None = None) -> int:
    if value is None or value == "":
        if default is None:
            raise E.ParameterInvalid(f"{name} is required")
        return default
    try:
        return int(value)
    except ValueError:
        raise E.ParameterInvalid(f"{name} must be an integer: {value[:64]!r}") from None


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_body(body: bytes, error: type[E.SlsError]) -> Any:
    """A request body as JSON (None when empty); `error` when it is not JSON, including the
    NaN and Infinity that Python's json module would otherwise read, and arrays or objects
    nested too deeply for the parser (RecursionError)."""
    if not body:
        return None
    try:
        return json.loads(body.decode("utf-8"), parse_constant=_not_json)
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError is a ValueError
        raise error(f"body is not valid JSON: {exc}") from None
    except RecursionError:  # `[[[[...` nested deeper than the parser goes: no request does
        raise error("body is not valid JSON: nested too deeply") from None


def body_json(call: Call, error: type[E.SlsError]) -> Any:
    return parse_body(call.body, error)


def as_bool(value: object) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return None


MAX_GROUP_TIMEOUT_S = 2**31 - 1


def as_seconds(value: object) -> int | None:
    """A group timeout: an integer, or an integral float (the Python SDK sends
    `heartbeat_interval * 2`, e.g. 4.0); anything else is None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and value <= MAX_GROUP_TIMEOUT_S:  # beyond: SQLite cannot hold it
        return value
    return None


def shard_json(s: Shard) -> dict[str, object]:
    return {
        "shardID": s.shard_id,
        "status": "readonly" if s.readonly else "readwrite",
        "inclusiveBeginKey": s.begin_key,
        "exclusiveEndKey": s.end_key,
        "createTime": s.create_time,
        # loghubd extension: the shards this one was split or merged from (SDKs ignore it).
        "parents": list(s.parents),
    }
