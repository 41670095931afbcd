"""Read a consumer group's state from the service: `loghubd group describe` and `status`.

Standard SLS calls only, so it works against Alibaba Cloud SLS: ListShards, GetCheckPoint,
GetCursor (end), GetCursorTime (the write time at a cursor) and PullLogs (to count the logs
behind a checkpoint). `loghubd serve`'s group-status extension (`?type=status`) adds owners,
states and heartbeats when it answers with the expected shape; any other answer (a service
that treats the unknown `type` as a plain GetCheckPoint and returns a list, an error) is
ignored, never trusted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio

from loghubd.admin.view import ConsumerRow, GroupView, ShardRow, state_word
from loghubd.models import Batch
from loghubd.protocol import cursor as cursors
from loghubd.protocol import errors as E

if TYPE_CHECKING:
    from loghubd.sls import SlsClient  # annotations only: no aiohttp at import

# Log groups read to count the logs behind a checkpoint exactly; beyond it, an estimate.
EXACT_LOG_GROUPS = 3000


async def list_groups(client: SlsClient, logstore: str) -> list[dict[str, Any]]:
    return await client.list_groups(logstore)


async def group_settings(client: SlsClient, logstore: str, group: str) -> dict[str, Any]:
    """The group's entry of ListConsumerGroup; ConsumerGroupNotExist when there is none."""
    for g in await client.list_groups(logstore):
        if g.get("name") == group:
            return g
    raise E.ConsumerGroupNotExist(f"consumer group {group} does not exist")


async def serve_status(client: SlsClient, logstore: str, group: str) -> dict[str, Any] | None:
    """serve's group status, or None when the service does not give it in the expected shape."""
    try:
        answer: Any = await client.group_status(logstore, group)
    except E.SlsError as exc:
        if exc.retryable:
            raise
        return None
    if (
        isinstance(answer, dict)
        and isinstance(answer.get("shards"), list)
        and isinstance(answer.get("consumers"), list)
        and all(isinstance(s, dict) and isinstance(s.get("shard"), int) for s in answer["shards"])
    ):
        return answer
    return None


def lag_groups(checkpoint: str, end: str) -> int | None:
    """Log groups between two cursors; None when the cursors are not numbers (exact on SLS
    and serve, whose cursors count log groups)."""
    try:
        return max(0, cursors.decode(end) - cursors.decode(checkpoint))
    except cursors.InvalidCursorString:
        return None


async def count_logs(
    client: SlsClient, logstore: str, shard: int, start: str, end: str, groups: int | None
) -> tuple[int, bool]:
    """Logs between `start` and `end`: exact when they fit in EXACT_LOG_GROUPS log groups,
    else the logs of those groups scaled by `groups` (an estimate, flagged False)."""
    logs = read = 0
    cursor = start
    while read < EXACT_LOG_GROUPS and cursor != end:
        pulled = await client.pull(logstore, shard, cursor, 1000, end_cursor=end)
        if pulled.count == 0 and pulled.next_cursor == cursor:
            break
        logs += Batch(shard, cursor, pulled.next_cursor, pulled.data, pulled.count).log_count
        read += pulled.count
        cursor = pulled.next_cursor
        if pulled.count == 0:
            break
    if cursor == end or not groups or read == 0 or read >= groups:
        return logs, True
    return round(logs / read * groups), False


async def describe(
    client: SlsClient, logstore: str, group: str, now: float, *, count: bool = True
) -> GroupView:
    settings = await group_settings(client, logstore, group)
    shards = await client.list_shards(logstore)
    checkpoints = {c["shard"]: c for c in await client.checkpoints(logstore, group)}
    status = await serve_status(client, logstore, group)
    states = {s["shard"]: s for s in (status or {}).get("shards", [])}
    rows: dict[int, ShardRow] = {}

    async def one(info: dict[str, Any]) -> None:
        sid = int(info["shardID"])
        cp = checkpoints.get(sid, {})
        st = states.get(sid, {})
        row = ShardRow(
            shard=sid,
            status=str(info.get("status", "")),
            state=state_word(str(st.get("state", ""))),
            owner=str(st.get("owner") or ""),
            next_owner=str(st.get("next") or ""),
            checkpoint=str(cp.get("checkpoint") or ""),
            committed_by=str(cp.get("consumer") or ""),
            committed_at=(cp["updateTime"] / 1e6) if cp.get("updateTime") else None,
        )
        row.end_cursor = await client.get_cursor(logstore, sid, "end")
        start = row.checkpoint or await client.get_cursor(logstore, sid, "begin")
        row.lag_log_groups = lag_groups(start, row.end_cursor)
        if row.checkpoint:
            row.checkpoint_time = await client.cursor_time(logstore, sid, row.checkpoint)
        if row.lag_log_groups != 0:
            row.end_time = await client.cursor_time(logstore, sid, row.end_cursor)
            oldest = row.checkpoint_time  # the write time of the first unread log group
            if oldest is None:
                oldest = await client.cursor_time(logstore, sid, start)
            row.lag_seconds = max(0, round(now - oldest))
            if count:
                row.lag_logs, row.lag_logs_exact = await count_logs(
                    client, logstore, sid, start, row.end_cursor, row.lag_log_groups
                )
        else:
            row.end_time = row.checkpoint_time
            row.lag_seconds, row.lag_logs = 0, 0
        rows[sid] = row

    async with anyio.create_task_group() as tg:
        for info in shards:
            tg.start_soon(one, info)
    view = GroupView(
        project=client.project,
        logstore=logstore,
        group=group,
        timeout=_int_or_none(settings.get("timeout")),
        order=settings.get("order") if isinstance(settings.get("order"), bool) else None,
        consumers=[],
        shards=[rows[k] for k in sorted(rows)],
        source="loghubd serve" if status is not None else "checkpoints",
        now=now,
    )
    view.consumers = _consumers(view, status, now)
    return view


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _consumers(view: GroupView, status: dict[str, Any] | None, now: float) -> list[ConsumerRow]:
    rows: dict[str, ConsumerRow] = {}
    for shard in view.shards:  # commit ages from the standard checkpoints
        if shard.committed_by:
            row = rows.setdefault(shard.committed_by, ConsumerRow(shard.committed_by))
            if shard.committed_at is not None:
                seen = now - shard.committed_at
                row.commit_age = seen if row.commit_age is None else min(row.commit_age, seen)
    if status is not None:
        live = {str(c) for c in status.get("consumers", [])}
        heartbeats = status.get("heartbeatAge")
        for name in live:
            rows.setdefault(name, ConsumerRow(name))
        for row in rows.values():
            row.live = row.name in live
            if isinstance(heartbeats, dict) and isinstance(heartbeats.get(row.name), int | float):
                row.heartbeat_age = float(heartbeats[row.name])
        for shard in view.shards:
            if shard.owner in rows:
                rows[shard.owner].shards.append(shard.shard)
    else:
        # No consumer list in the standard API: a consumer that committed within the group's
        # timeout is taken as live, and holds the shards it last committed.
        limit = view.timeout or 60
        for row in rows.values():
            row.live = row.commit_age is not None and row.commit_age <= limit
        for shard in view.shards:
            if shard.committed_by in rows and rows[shard.committed_by].live:
                rows[shard.committed_by].shards.append(shard.shard)
    return sorted(rows.values(), key=lambda r: (not r.live, r.name))
