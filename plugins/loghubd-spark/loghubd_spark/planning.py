"""The pure planning of the LogHub streaming source (`stream`): shards and their lineage, the
fair share of a trigger's log groups between shards (`admit`), and the next micro-batch's
end offsets (`plan`). No Spark, no I/O: table- and property-tested without a session."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from loghubd.arrow import position
from loghubd.protocol import cursor as cursors

Offsets = dict[str, str]


@dataclass(frozen=True, slots=True)
class ShardInfo:
    shard: int
    readonly: bool
    begin_key: int
    end_key: int
    parents: tuple[int, ...] | None  # None: the service does not say (not loghubd serve)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> ShardInfo:
        raw_parents = obj.get("parents")
        parents = tuple(int(p) for p in raw_parents) if isinstance(raw_parents, list) else None
        return cls(
            shard=int(obj["shardID"]),
            readonly=str(obj.get("status", "")).lower() == "readonly",
            begin_key=int(str(obj.get("inclusiveBeginKey") or "0"), 16),
            end_key=int(str(obj.get("exclusiveEndKey") or "f" * 32), 16),
            parents=parents,
        )


def lineage(shards: Sequence[ShardInfo]) -> dict[int, tuple[int, ...]]:
    """Each shard's parents: the service's own (`parents`, loghubd serve) when every shard
    has them, else its ancestors by the key-range heuristic (see the module docstring)."""
    if all(s.parents is not None for s in shards):
        return {s.shard: s.parents or () for s in shards}
    out: dict[int, tuple[int, ...]] = {}
    for s in shards:
        out[s.shard] = tuple(
            o.shard
            for o in shards
            if o.shard < s.shard and o.begin_key < s.end_key and s.begin_key < o.end_key
        )
    return out


def admit(available: Mapping[str, int], budget: int) -> dict[str, int]:
    """Share `budget` log groups between shards fairly (water-filling, in shard order): each
    gets min(available, an equal share of what is left)."""
    out = {k: 0 for k in available}
    want = {k: n for k, n in available.items() if n > 0}
    left = budget
    while want and left > 0:
        share = max(1, left // len(want))
        for k in sorted(want, key=int):
            take = min(want[k], share, left)
            out[k] += take
            want[k] -= take
            left -= take
            if not want[k]:
                del want[k]
            if left <= 0:
                break
    return out


def _ordered(offsets: Mapping[str, str]) -> Offsets:
    """Keys in shard order: equal offsets must serialize to equal JSON."""
    return {k: offsets[k] for k in sorted(offsets, key=int)}


def plan(
    start: Mapping[str, str],
    shards: Sequence[ShardInfo],
    ends: Mapping[int, str],
    begins: Mapping[int, str],
    *,
    order: bool,
    budget: int | None = None,
    targets: Mapping[int, str] | None = None,
) -> Offsets:
    """The end offsets of the next micro-batch.

    `ends`: every listed shard's end cursor; `begins`: the begin cursor of every listed shard
    missing from `start`; `budget`: at most this many log groups in all (None: no limit);
    `targets`: Trigger.AvailableNow's end cursors (shards not in it are left alone)."""
    parents = lineage(shards)
    by_id = {s.shard: s for s in shards}
    memo: dict[int, bool] = {}

    def finished(shard: int) -> bool:
        info = by_id.get(shard)
        if info is None:
            return True  # gone (deleted or expired): nothing left to wait for
        if shard not in memo:
            memo[shard] = False  # a cycle (impossible lineage) counts as unfinished
            memo[shard] = (
                info.readonly
                and start.get(str(shard)) == ends[shard]
                and all(finished(p) for p in parents[shard])
            )
        return memo[shard]

    out: dict[str, str] = {}
    available: dict[str, int] = {}
    for info in shards:
        key = str(info.shard)
        if targets is not None and info.shard not in targets:
            if key in start:
                out[key] = start[key]
            continue
        current = start.get(key)
        if current is None:
            out[key] = begins[info.shard]  # enters the offsets; read from the next batch on
            continue
        out[key] = current
        if order and not all(finished(p) for p in parents[info.shard]):
            continue  # a child waits for its parents
        target = ends[info.shard] if targets is None else targets[info.shard]
        if target == current:
            continue
        if budget is None:
            out[key] = target
            continue
        a, b = position(current), position(target)
        if a is None or b is None:
            out[key] = target  # not positions: cannot count, take the whole range
        elif b > a:
            available[key] = b - a
    if budget is not None and available:
        for key, n in admit(available, budget).items():
            if n:
                pos = position(out[key])
                assert pos is not None
                out[key] = cursors.encode(pos + n)
    return _ordered(out)


# -- Spark ---------------------------------------------------------------------------------------
