"""What `loghubd group describe` shows, as data: shards, consumers, totals; and their text.

Pure: no I/O, no clock (the caller passes `now`). The inspector (`admin.inspect`) fills these
from the SLS calls; `render` and `to_json` present them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

# The coordinator's shard states (as the reference spells them) in an operator's words.
STATE_WORDS = {
    "wait": "waiting for parents",
    "not_alloc": "unassigned",
    "already_alloc": "assigned",
    "transfer": "handing over",
    "over": "finished",
}


def state_word(state: str) -> str:
    return STATE_WORDS.get(state, state)


@dataclass(slots=True)
class ShardRow:
    shard: int
    status: str  # readwrite / readonly (ListShards)
    state: str = ""  # operator words; "" when the service does not say
    owner: str = ""
    next_owner: str = ""
    checkpoint: str = ""  # the committed cursor ("" = none yet)
    checkpoint_time: int | None = None  # write time of the log group at the checkpoint
    committed_by: str = ""
    committed_at: float | None = None  # unix seconds of the last commit
    end_cursor: str = ""
    end_time: int | None = None  # write time of the newest log group
    lag_log_groups: int | None = None
    lag_logs: int | None = None
    lag_logs_exact: bool = True
    lag_seconds: int | None = None  # age of the oldest unread log group (0: nothing unread)


@dataclass(slots=True)
class ConsumerRow:
    name: str
    shards: list[int] = field(default_factory=list)
    heartbeat_age: float | None = None  # seconds since its last heartbeat, if known
    commit_age: float | None = None  # seconds since its last checkpoint commit, if known
    live: bool | None = None  # None: the service does not say


@dataclass(slots=True)
class GroupView:
    project: str
    logstore: str
    group: str
    timeout: int | None
    order: bool | None
    consumers: list[ConsumerRow]
    shards: list[ShardRow]
    # Where owners and consumers came from: "loghubd serve" (its group-status extension) or
    # "checkpoints" (standard calls only: owners are the last committers, liveness a guess).
    source: str = "checkpoints"
    now: float = 0.0

    @property
    def live_consumers(self) -> list[str]:
        return [c.name for c in self.consumers if c.live]

    def totals(self) -> dict[str, Any]:
        """Sums over the shards, each None (unknown) as soon as one shard's figure is unknown
        (`--no-count` leaves a lagging shard's `lag_logs` None). `lag_logs_exact` False means
        estimated (`~`), as for a shard: it never marks a partial sum."""
        return {
            "shards": len(self.shards),
            "lag_log_groups": known_total([s.lag_log_groups for s in self.shards], sum),
            "lag_logs": known_total([s.lag_logs for s in self.shards], sum),
            "lag_logs_exact": all(s.lag_logs_exact for s in self.shards),
            "max_lag_seconds": known_total([s.lag_seconds for s in self.shards], max),
        }


def known_total(values: Sequence[int | None], combine: Callable[[list[int]], int]) -> int | None:
    """`combine` of the values, or None when one is unknown (or there are none).

    Why not combine the known ones: the result reads as the whole. `--no-count` leaves every
    lagging shard's log count unknown, and a sum of the rest said `0 logs` behind.
    """
    known = [v for v in values if v is not None]
    if not known or len(known) < len(values):
        return None
    return combine(known)


def to_json(view: GroupView) -> dict[str, Any]:
    shards = []
    for row in view.shards:
        shard = asdict(row)
        shard["checkpoint_at"] = iso(row.checkpoint_time)
        shard["end_at"] = iso(row.end_time)
        shards.append(shard)
    return {
        "project": view.project,
        "logstore": view.logstore,
        "group": view.group,
        "timeout": view.timeout,
        "order": view.order,
        "source": view.source,
        "consumers": [asdict(c) for c in view.consumers],
        "shards": shards,
        "totals": view.totals(),
    }


def iso(when: float | None) -> str | None:
    if when is None:
        return None
    return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def age(seconds: float | None) -> str:
    """`3s`, `4m05s`, `2h10m`, `3d04h`; `-` when unknown."""
    if seconds is None:
        return "-"
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def _count(value: int | None, exact: bool = True) -> str:
    if value is None:
        return "-"
    return f"{value:,}" if exact else f"~{value:,}"


def owner_cell(row: ShardRow, source: str) -> str:
    """Who holds the shard, as the service reports it: `-` for nobody (an unassigned shard),
    `?` when the service does not report owners (`source == "checkpoints"`). Never the last
    committer: a consumer that stopped is the last committer of the shards it left."""
    owner = row.owner or ("?" if source == "checkpoints" else "-")
    return owner + (f" -> {row.next_owner}" if row.next_owner else "")


def committer_cell(row: ShardRow, now: float) -> str:
    """Who committed the checkpoint last, and how long ago (`now` 0: not given); `-` for no
    commit, `(unnamed)` for a commit without a consumer name (e.g. a `group reset`)."""
    if row.committed_at is None:
        return row.committed_by or "-"
    when = f"{age(now - row.committed_at)} ago" if now > 0 else ""
    return " ".join(part for part in (row.committed_by or "(unnamed)", when) if part)


def render(view: GroupView) -> str:
    """The text of `loghubd group describe` / `loghubd status`."""
    lines = [
        f"group {view.group} on {view.project}/{view.logstore}"
        + (f"  timeout {view.timeout}s" if view.timeout is not None else "")
        + (f"  ordered {'yes' if view.order else 'no'}" if view.order is not None else "")
    ]
    if view.source == "checkpoints":
        lines += [
            "  (the service does not report owners or consumers: OWNER is ?, liveness is a guess",
            "   from commit times, and a live consumer's SHARDS are those it last committed)",
        ]
    if view.consumers:
        lines.append(f"{'CONSUMER':<28} {'LIVE':<5} {'HEARTBEAT':>9} {'COMMIT':>8}  SHARDS")
        for c in view.consumers:
            live = "-" if c.live is None else ("yes" if c.live else "no")
            shards = ",".join(str(s) for s in c.shards) or "-"
            lines.append(
                f"{c.name:<28} {live:<5} {age(c.heartbeat_age):>9} {age(c.commit_age):>8}  {shards}"
            )
    else:
        lines.append("consumers: none")
    lines.append(
        f"{'SHARD':>5}  {'STATE':<20} {'OWNER':<24} {'COMMITTED POSITION':<22} "
        f"{'LAG(groups)':>11} {'LAG(logs)':>10} {'LAG(time)':>9}  LAST COMMITTED BY"
    )
    for r in view.shards:
        state = r.state or "-"
        if r.status == "readonly":
            state += " (read-only)"
        owner = owner_cell(r, view.source)
        if not r.checkpoint:
            position = "none (start setting)"
        else:
            position = iso(r.checkpoint_time) or "?"
        lines.append(
            f"{r.shard:>5}  {state:<20} {owner:<24} {position:<22} "
            f"{_count(r.lag_log_groups):>11} {_count(r.lag_logs, r.lag_logs_exact):>10} "
            f"{age(r.lag_seconds) if r.lag_seconds is not None else '-':>9}  "
            f"{committer_cell(r, view.now)}"
        )
    t = view.totals()
    logs = (
        "logs not counted"
        if t["lag_logs"] is None
        else f"{_count(t['lag_logs'], t['lag_logs_exact'])} logs"
    )
    lines.append(
        f"total  {t['shards']} shard(s), lag {_count(t['lag_log_groups'])} log groups, "
        f"{logs}, oldest unread written {age(t['max_lag_seconds'])} ago"
    )
    if not t["lag_logs_exact"]:
        lines.append("  (~ estimated from the logs per group read so far)")
    return "\n".join(lines)


def render_groups(groups: list[dict[str, Any]], project: str, logstore: str) -> str:
    if not groups:
        return f"no consumer groups on {project}/{logstore}"
    lines = [f"{'GROUP':<32} {'TIMEOUT':>7}  ORDERED"]
    for g in groups:
        lines.append(
            f"{g.get('name', '?'):<32} {g.get('timeout', '-')!s:>6}s  "
            f"{'yes' if g.get('order') else 'no'}"
        )
    return "\n".join(lines)
