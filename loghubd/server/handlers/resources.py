"""Projects and logstores: create, get, update, delete, list."""

from __future__ import annotations

import time
from typing import TypeVar

from aiohttp import web

from loghubd.protocol import errors as E
from loghubd.server.call import (
    Call,
    body_json,
    empty_response,
    int_param,
    json_response,
)

T = TypeVar("T")

# -- projects -------------------------------------------------------------------------------


async def create_project(call: Call) -> web.Response:
    data = body_json(call, E.ParameterInvalid) or {}
    if not isinstance(data, dict):
        raise E.ParameterInvalid("body must be a JSON object")
    # Lower case as a project host names it (host names are read in lower case): a
    # `projectName` sent to the service host as `MixedCase` must be reachable afterwards.
    name = call.target.project.lower()
    call.service.create_project(name, str(data.get("description", "")))
    return empty_response()


async def list_projects(call: Call) -> web.Response:
    """ListProject pages (`offset`, `size`) and filters (`projectName`, `description`: parts
    of the name or description) as SLS does: the SDKs' pagers advance by `count` until
    `total` is reached, and a filter that matched everything would hand them wrong projects."""
    name_part = call.query.get("projectName", "")
    description_part = call.query.get("description", "")
    matching = [
        p
        for p in call.service.storage.list_projects()
        if name_part in p.name and description_part in p.description
    ]
    page, total = _page(call, matching)
    return json_response(
        {
            "count": len(page),
            "total": total,
            "projects": [
                {
                    "projectName": p.name,
                    "description": p.description,
                    "status": "Normal",
                    "region": "local",
                }
                for p in page
            ],
        }
    )


def _page(call: Call, matching: list[T]) -> tuple[list[T], int]:
    """The page of `matching` that the request's `offset` and `size` ask for (a negative
    size: all from `offset`, as the list APIs' "-1 means every one"), and how many matched
    in all (SLS's `total`; `count` is the page's length)."""
    offset = int_param(call.query.get("offset"), "offset", default=0)
    size = int_param(call.query.get("size"), "size", default=100)
    if offset < 0:  # a negative slice start would count from the end
        raise E.ParameterInvalid(f"offset must not be negative: {offset}")
    page = matching[offset : offset + size] if size >= 0 else matching[offset:]
    return page, len(matching)


async def get_project(call: Call) -> web.Response:
    call.service.project(call.target.project)
    p = call.service.storage.get_project(call.target.project)
    assert p is not None
    return json_response(
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
    call.service.project(call.target.project)
    data = body_json(call, E.ParameterInvalid)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise E.ParameterInvalid("body must be a JSON object")
    call.service.storage.update_project(
        call.target.project, str(data.get("description", "")), int(time.time())
    )
    return empty_response()


async def delete_project(call: Call) -> web.Response:
    call.service.delete_project(call.target.project)
    return empty_response()


# -- logstores ------------------------------------------------------------------------------


async def create_logstore(call: Call) -> web.Response:
    data = body_json(call, E.LogStoreInfoInvalid)
    if not isinstance(data, dict):
        raise E.LogStoreInfoInvalid("body must be a JSON object")
    try:
        ttl = int(data.get("ttl", 30))
        shards = int(data.get("shardCount", 2))
    except (KeyError, TypeError, ValueError, OverflowError) as exc:  # 1e999: inf
        raise E.LogStoreInfoInvalid(f"invalid logstore definition: {exc}") from None
    call.service.create_logstore(call.target.project, call.target.ls, ttl, shards)
    return empty_response()


async def list_logstores(call: Call) -> web.Response:
    call.service.project(call.target.project)
    pattern = call.query.get("logstoreName", "")
    stored = call.service.storage.list_logstores(call.target.project)
    page, total = _page(call, [ls.name for ls in stored if pattern in ls.name])
    return json_response({"count": len(page), "total": total, "logstores": page})


async def get_logstore(call: Call) -> web.Response:
    ls = call.service.logstore(call.target.project, call.target.ls)
    shards = call.service.storage.list_shards(ls.id)
    return json_response(
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
    ls = call.service.logstore(call.target.project, call.target.ls)
    data = body_json(call, E.LogStoreInfoInvalid)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise E.LogStoreInfoInvalid("body must be a JSON object")
    try:
        ttl = int(data.get("ttl", ls.ttl))
    except (TypeError, ValueError, OverflowError):  # 1e999 reads as inf
        raise E.LogStoreInfoInvalid("ttl must be an integer") from None
    if not 1 <= ttl <= 3650:  # as at creation; ttl <= 0 would expire every stored log
        raise E.LogStoreInfoInvalid("ttl must be within [1, 3650] days")
    call.service.storage.update_logstore(ls.id, ttl, int(time.time()))
    return empty_response()


async def delete_logstore(call: Call) -> web.Response:
    call.service.delete_logstore(call.target.project, call.target.ls)
    return empty_response()
