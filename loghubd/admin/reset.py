"""`loghubd group reset`: move a group's checkpoints, planned first, applied on request.

A target is `begin`, `end`, a time (unix seconds or ISO-8601), a cursor, or a shift of the
current checkpoint by a duration (`-1h`, `+30m`, `-90s`, `-2d`). `parse_target` and
`parse_duration` are pure; `plan` resolves the target per shard with the standard calls
(GetCursor, GetCursorTime) and `apply` commits with `forceSuccess=true`, as the official SDK's
`update_check_point` does.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from itertools import islice
from typing import TYPE_CHECKING, Any

from loghubd.admin.view import iso

if TYPE_CHECKING:
    from loghubd.sls import SlsClient  # annotations only: no aiohttp at import

_DURATION = re.compile(r"^([+-]?)(\d+(?:\.\d+)?)([smhd]?)$")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
# The last second a time can be given as (and printed as ISO-8601): 9999-12-31T23:59:59Z.
LATEST = int(datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp())

# What a live loghubd daemon (or the SDK's consumer library) does with a checkpoint moved
# under it; printed with --force.
LIVE_OWNERS = (
    "live owners do not re-read checkpoints while they hold a shard: each goes on from the "
    "position it has in memory, and its next commit (after its next batch) replaces the "
    "reset. The reset takes effect for a shard when it is next taken from its checkpoint: "
    "after the owner restarts, leaves, or times out. Stop the consumers, reset, start them "
    "for a reset that holds."
)


class TargetError(ValueError):
    """A reset target that cannot be understood; the message says what is accepted."""


@dataclass(frozen=True, slots=True)
class Target:
    kind: str  # begin | end | time | cursor | shift
    time: int = 0  # kind == "time": unix seconds
    cursor: str = ""  # kind == "cursor"
    shift: float = 0.0  # kind == "shift": seconds, negative = back

    def describe(self) -> str:
        if self.kind == "time":
            return f"the first log group written at or after {iso(self.time)}"
        if self.kind == "cursor":
            return f"cursor {self.cursor}"
        if self.kind == "shift":
            return f"the current checkpoint shifted by {self.shift:+g}s"
        return f"the {self.kind} of each shard"


def parse_duration(text: str) -> float:
    m = _DURATION.match(text.strip())
    if not m:
        raise TargetError(
            f"--shift-by {text!r}: not a duration: use a number with s, m, h or d, "
            "with - to go back (e.g. -1h, +30m, -90s)"
        )
    sign = -1.0 if m.group(1) == "-" else 1.0
    return sign * float(m.group(2)) * _UNIT[m.group(3)]


def parse_time(text: str) -> int:
    """Unix seconds or ISO-8601 (UTC without a zone) → unix seconds, between 1970 and the
    end of year 9999 (what a checkpoint's time can be, and what a date can show)."""
    text = text.strip()
    try:
        number: float | None = float(text)
    except ValueError:
        number = None
    if number is not None:
        if not math.isfinite(number):
            raise TargetError(f"--to {text!r}: not a time: use unix seconds or ISO-8601")
        when = int(number)
    else:
        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise TargetError(
                f"--to {text!r}: not a time: use begin, end, unix seconds or ISO-8601 "
                "(2026-11-25T17:00:00Z; without a zone it is UTC)"
            ) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        when = int(moment.timestamp())
    if not 0 <= when <= LATEST:
        raise TargetError(
            f"--to {text!r}: out of range: a time from 1970-01-01T00:00:00Z (unix 0) to "
            f"9999-12-31T23:59:59Z (unix {LATEST}) in unix seconds or ISO-8601"
        )
    return when


def parse_target(to: str | None, to_cursor: str | None, shift_by: str | None) -> Target:
    given = [x for x in (to, to_cursor, shift_by) if x is not None]
    if len(given) != 1:
        raise TargetError("give exactly one of --to (begin, end, a time), --to-cursor, --shift-by")
    if to_cursor is not None:
        if not to_cursor:
            raise TargetError("--to-cursor needs a cursor")
        return Target("cursor", cursor=to_cursor)
    if shift_by is not None:
        return Target("shift", shift=parse_duration(shift_by))
    assert to is not None
    if to in ("begin", "end"):
        return Target(to)
    return Target("time", time=parse_time(to))


_SHARD_PART = re.compile(r"(\d+)(?:-(\d+))?")


def parse_shard_ids(text: str | None) -> list[tuple[int, int]] | None:
    """`0,2,5-7` → [(0, 0), (2, 2), (5, 7)]; None or "" → None (every shard). A range must be
    `LOW-HIGH` with LOW ≤ HIGH, as `consumer.shards` in the config."""
    if not text:
        return None
    ranges = []
    for part in (p.strip() for p in text.split(",")):
        m = _SHARD_PART.fullmatch(part)
        if not m:
            raise TargetError(
                f"--shards {text!r}: {part!r} is not a shard id or a range: use ids and "
                "ranges like 0,2,5-7"
            )
        low, high = int(m.group(1)), int(m.group(2) or m.group(1))
        if low > high:
            raise TargetError(
                f"--shards {text!r}: the range {part} is empty: write it low to high ({high}-{low})"
            )
        ranges.append((low, high))
    return ranges


def parse_shards(text: str | None, known: list[int]) -> list[int]:
    """`0,2,5-7` → those shards (each must exist); None → every shard."""
    ranges = parse_shard_ids(text)
    if ranges is None:
        return sorted(known)
    chosen = sorted({k for k in known if any(lo <= k <= hi for lo, hi in ranges)})
    # Counted, not listed one by one: a range may be wide (0-99999).
    missing = sum(hi - lo + 1 for lo, hi in _merged(ranges)) - len(chosen)
    if missing:
        have = set(known)
        gaps = (i for lo, hi in _merged(ranges) for i in range(lo, hi + 1) if i not in have)
        absent = [str(i) for i in islice(gaps, 10)]
        more = f" and {missing - len(absent)} more" if missing > len(absent) else ""
        raise TargetError(
            f"--shards: no shard {', '.join(absent)}{more} in this logstore "
            f"(it has {', '.join(map(str, sorted(known)))})"
        )
    return chosen


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Overlapping or adjacent ranges joined, so no id is counted twice."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


@dataclass(slots=True)
class Move:
    shard: int
    old_cursor: str
    old_time: int | None
    new_cursor: str
    new_time: int | None

    def line(self) -> str:
        old = f"{iso(self.old_time)} ({self.old_cursor})" if self.old_cursor else "none"
        new = f"{iso(self.new_time)} ({self.new_cursor})"
        same = "  (unchanged)" if self.old_cursor == self.new_cursor else ""
        return f"shard {self.shard:>3}: {old} -> {new}{same}"

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["old_at"], out["new_at"] = iso(self.old_time), iso(self.new_time)
        return out


async def plan(
    client: SlsClient,
    logstore: str,
    group: str,
    shards: list[int],
    target: Target,
) -> list[Move]:
    checkpoints = {c["shard"]: c for c in await client.checkpoints(logstore, group)}
    moves = []
    for sid in shards:
        old = str(checkpoints.get(sid, {}).get("checkpoint") or "")
        old_time = await client.cursor_time(logstore, sid, old) if old else None
        if target.kind in ("begin", "end"):
            new = await client.get_cursor(logstore, sid, target.kind)
        elif target.kind == "time":
            new = await client.get_cursor(logstore, sid, str(target.time))
        elif target.kind == "cursor":
            new = target.cursor
        else:
            base = old_time
            if base is None:  # no checkpoint yet: shift from the shard's beginning
                base = await client.cursor_time(
                    logstore, sid, await client.get_cursor(logstore, sid, "begin")
                )
            shifted = min(LATEST, max(0, int(base + target.shift)))
            new = await client.get_cursor(logstore, sid, str(shifted))
        # GetCursorTime also proves a given cursor belongs to this shard.
        new_time = await client.cursor_time(logstore, sid, new)
        moves.append(Move(sid, old, old_time, new, new_time))
    return moves


async def apply(client: SlsClient, logstore: str, group: str, moves: list[Move]) -> None:
    for m in moves:
        if m.new_cursor != m.old_cursor:
            await client.commit(logstore, group, "", m.shard, m.new_cursor, force=True)
