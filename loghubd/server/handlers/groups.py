"""Consumer groups: create, list, update, delete; heartbeats, checkpoints and leave (the
coordinator's state machine answers); the group-status extension of `loghubd status`."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from loghubd.protocol import errors as E
from loghubd.server.call import (
    Call,
    as_bool,
    as_seconds,
    body_json,
    empty_response,
    int_param,
    json_response,
)
from loghubd.server.service import LogService


async def create_group(call: Call) -> web.Response:
    ls = call.service.logstore(call.target.project, call.target.ls)
    data = body_json(call, E.JsonInfoInvalid)
    if not isinstance(data, dict):
        raise E.JsonInfoInvalid("body must be {consumerGroup, timeout, order}")
    timeout, order = as_seconds(data.get("timeout")), as_bool(data.get("order", False))
    if timeout is None or order is None:
        raise E.JsonInfoInvalid("timeout must be a whole number of seconds and order a boolean")
    call.service.create_group(ls, call.target.cg, timeout, order)
    return empty_response()


async def list_groups(call: Call) -> web.Response:
    ls = call.service.logstore(call.target.project, call.target.ls)
    groups = call.service.list_groups(ls)
    return json_response(
        [{"name": g.name, "timeout": int(g.timeout), "order": g.order} for g in groups]
    )


async def update_group(call: Call) -> web.Response:
    ls = call.service.logstore(call.target.project, call.target.ls)
    data = body_json(call, E.JsonInfoInvalid)
    if not isinstance(data, dict) or not ({"timeout", "order"} & set(data)):
        raise E.JsonInfoInvalid("body must hold timeout and/or order")
    timeout = as_seconds(data["timeout"]) if "timeout" in data else None
    order = as_bool(data["order"]) if "order" in data else None
    if ("timeout" in data and timeout is None) or ("order" in data and order is None):
        raise E.JsonInfoInvalid("timeout must be a whole number of seconds and order a boolean")
    call.service.update_group(ls, call.target.cg, timeout, order)
    return empty_response()


async def delete_group(call: Call) -> web.Response:
    ls = call.service.logstore(call.target.project, call.target.ls)
    call.service.delete_group(ls, call.target.cg)
    return empty_response()


async def group_post(call: Call) -> web.Response:
    ls = call.service.logstore(call.target.project, call.target.ls)
    group, kind = call.target.cg, call.query.get("type", "")
    consumer = call.query.get("consumer", "")
    if kind == "heartbeat":
        held = body_json(call, E.JsonInfoInvalid)
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
        return json_response(call.service.heartbeat(ls, group, consumer, held, allowed))
    if kind == "checkpoint":
        data = body_json(call, E.JsonInfoInvalid)
        if (
            not isinstance(data, dict)
            or not isinstance(data.get("shard"), int)
            or not isinstance(data.get("checkpoint"), str)
        ):
            raise E.JsonInfoInvalid("checkpoint body must be {shard: int, checkpoint: str}")
        force = as_bool(call.query.get("forceSuccess", "false"))
        if force is None:
            raise E.ParameterInvalid("forceSuccess must be true or false")
        if not consumer and not force:
            raise E.ParameterInvalid("consumer is required unless forceSuccess is true")
        call.service.commit(ls, group, consumer, data["shard"], data["checkpoint"], force)
        return empty_response()
    if kind == "leave":  # loghubd extension: hand every shard back at once
        if not consumer:
            raise E.ParameterInvalid("consumer is required")
        call.service.leave(ls, group, consumer)
        return empty_response()
    raise E.ParameterInvalid(f"type must be heartbeat, checkpoint or leave, not {kind[:32]!r}")


async def group_get(call: Call) -> web.Response:
    ls = call.service.logstore(call.target.project, call.target.ls)
    group = call.target.cg
    if call.query.get("type") == "status":  # loghubd extension, for `loghubd status`
        return json_response(_group_status(call.service, ls, group))
    shard = call.query.get("shard")
    shard_id = None if shard in (None, "") else int_param(shard, "shard")
    return json_response(call.service.checkpoints(ls, group, shard_id))


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
    now = service.clock()
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
        # loghubd extension: seconds since each live consumer's last heartbeat
        "heartbeatAge": {
            c: round(max(0.0, now - seen), 3) for c, seen in sorted(group.consumers.items())
        },
        "shards": out,
        # loghubd extension: consumers' shard allow-lists (heartbeat `shards=`)
        "allowed": {c: sorted(s) for c, s in sorted(group.allowed.items())},
    }
