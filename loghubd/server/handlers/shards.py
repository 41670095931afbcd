"""Shards and their data: list, split, merge, delete; PutLogs, cursors and PullLogs
(with the SPL query of a consumer group)."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from loghubd.protocol import compress as codec
from loghubd.protocol import errors as E
from loghubd.protocol import pb
from loghubd.server import spl, spl_groups
from loghubd.server.call import (
    Call,
    empty_response,
    int_param,
    json_response,
    shard_json,
)


async def list_shards(call: Call) -> web.Response:
    ls = call.service.logstore(call.target.project, call.target.ls)
    return json_response([shard_json(s) for s in call.service.shards(ls)])


def _decoded_body(call: Call) -> bytes:
    declared = call.headers.get("x-log-compresstype")
    ctype = "" if declared is None else declared.strip().lower()
    limit = call.service.limits.max_body_bytes
    # Absent: not compressed. Present, it must name a codec: empty or blank is not one.
    if declared is not None and (not ctype or ctype not in codec.SUPPORTED):
        raise E.InvalidCompressType(f"compress type {declared[:32]!r} is not supported")
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
    ls = call.service.logstore(call.target.project, call.target.ls)
    raw = _decoded_body(call)
    key = call.query.get("key") if call.parts[3] == "route" else None
    if call.parts[3] == "route" and key is None:
        raise E.ParameterInvalid("key is required to route by hash")
    logs = call.service.put(ls, raw, key)
    call.metrics.ingest_logs.labels(ls.project, ls.name).inc(logs)
    call.metrics.ingest_bytes.labels(ls.project, ls.name).inc(len(raw))
    return empty_response()


async def shard_get(call: Call) -> web.Response:
    ls = call.service.logstore(call.target.project, call.target.ls)
    shard_id = call.target.shard_id
    kind = call.query.get("type", "")
    if kind == "cursor":
        return json_response(
            {"cursor": call.service.cursor(ls, shard_id, call.query.get("from", ""))}
        )
    if kind == "cursor_time":
        cur = call.query.get("cursor", "")
        return json_response({"cursor_time": call.service.cursor_time(ls, shard_id, cur)})
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
    count = int_param(call.query.get("count"), "count", default=1000)
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
    ls = call.service.logstore(call.target.project, call.target.ls)
    shard_id = call.target.shard_id
    action = call.query.get("action", "")
    if action == "split":
        result = call.service.split(ls, shard_id, call.query.get("key", ""))
    elif action == "merge":
        result = call.service.merge(ls, shard_id)
    else:
        raise E.ParameterInvalid(f"action must be split or merge, not {action[:32]!r}")
    return json_response([shard_json(s) for s in result])


async def delete_shard(call: Call) -> web.Response:
    ls = call.service.logstore(call.target.project, call.target.ls)
    call.service.delete_shard(ls, call.target.shard_id)
    return empty_response()
