"""`loghubd status`: what `kafka-consumer-groups --describe` shows, for a LogHub group.

Per shard: state, owner, checkpoint (and who committed it), the end position, and the lag
in log groups between them. Owner and state come from `loghubd serve`'s group-status
extension; against a server without it, only checkpoints and lag are shown.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import aiohttp
import anyio

from loghubd.config import Config
from loghubd.protocol import cursor as cursors
from loghubd.protocol import errors as E
from loghubd.protocol.signing import Credentials
from loghubd.sls import SlsClient, StaticCredentials, provider_for


async def describe(client: SlsClient, logstore: str, group: str) -> dict[str, Any]:
    try:
        status: dict[str, Any] | None = await client.group_status(logstore, group)
    except E.SlsError as exc:
        if isinstance(exc, E.ConsumerGroupNotExist | E.LogStoreNotExist | E.ProjectNotExist):
            raise
        status = None  # not loghubd serve: fall back to plain SLS calls
    checkpoints = {c["shard"]: c for c in await client.checkpoints(logstore, group)}
    states = {s["shard"]: s for s in (status or {}).get("shards", [])}
    rows = []
    for shard in sorted(set(checkpoints) | set(states)):
        cp = checkpoints.get(shard, {})
        st = states.get(shard, {})
        end = await client.get_cursor(logstore, shard, "end")
        checkpoint = cp.get("checkpoint") or ""
        lag: int | None = None
        if checkpoint:
            try:
                lag = max(0, cursors.decode(end) - cursors.decode(checkpoint))
            except cursors.InvalidCursorString:
                lag = None
        rows.append(
            {
                "shard": shard,
                "state": st.get("state", ""),
                "owner": st.get("owner", ""),
                "next": st.get("next", ""),
                "readonly": st.get("readonly"),
                "checkpoint": checkpoint,
                "committed_by": cp.get("consumer", ""),
                "end_cursor": end,
                "lag_log_groups": lag,
            }
        )
    return {
        "group": group,
        "logstore": logstore,
        "consumers": (status or {}).get("consumers"),
        "timeout": (status or {}).get("timeout"),
        "order": (status or {}).get("order"),
        "shards": rows,
    }


def render(desc: dict[str, Any]) -> str:
    lines = [f"group {desc['group']} on {desc['logstore']}"]
    if desc["consumers"] is not None:
        lines.append(
            f"consumers: {', '.join(desc['consumers']) or '(none)'}  "
            f"timeout {desc['timeout']}s  order {desc['order']}"
        )
    header = f"{'SHARD':>5}  {'STATE':<14} {'OWNER':<24} {'LAG(groups)':>11}  CHECKPOINT"
    lines.append(header)
    for r in desc["shards"]:
        owner = r["owner"] + (f" -> {r['next']}" if r["next"] else "")
        lag = "-" if r["lag_log_groups"] is None else str(r["lag_log_groups"])
        state = r["state"] + (" (ro)" if r["readonly"] else "")
        lines.append(
            f"{r['shard']:>5}  {state:<14} {owner or '-':<24} {lag:>11}  {r['checkpoint'] or '-'}"
        )
    return "\n".join(lines)


def run_status(args: argparse.Namespace, cfg: Config | None) -> int:
    endpoint = args.endpoint or (cfg.source.endpoint if cfg else None)
    project = args.project or (cfg.source.project if cfg else None)
    logstore = args.logstore or (cfg.source.logstore if cfg else None)
    group = args.group or (cfg.consumer.group if cfg else None)
    missing = [
        n
        for n, v in (
            ("--endpoint", endpoint),
            ("--project", project),
            ("--logstore", logstore),
            ("--group", group),
        )
        if not v
    ]
    if missing:
        print(f"loghubd status: {', '.join(missing)} required (or -c CONFIG)", file=sys.stderr)
        return 2
    # The configured provider, as the daemon signs: static or env keys, a file, a command.
    provider = provider_for(cfg.source) if cfg else StaticCredentials(Credentials("", ""))

    async def go() -> dict[str, Any]:
        async with aiohttp.ClientSession() as session, anyio.create_task_group() as tg:
            await tg.start(provider.run_refresh)  # the first load (file read, command run)
            client = SlsClient(
                session,
                str(endpoint),
                str(project),
                provider.get,
                auth_version=cfg.source.auth_version if cfg else "v1",
                region=cfg.source.region if cfg else "",
            )
            try:
                desc = await describe(client, str(logstore), str(group))
            finally:
                tg.cancel_scope.cancel()
        return desc

    try:
        desc = anyio.run(go)
    except E.SlsError as exc:
        print(f"loghubd status: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(desc, indent=2) if args.json else render(desc))
    return 0
