"""PURE: the in-flight byte budget of one source: how many log groups each pull may ask for.

The budget bounds the uncompressed bytes that are fetched but not yet finished, across all
shards of a source. It is kept *before* a pull is sent: a shard first asks for a grant, sized
in log groups from what is left of the budget and the bytes per log group its recent pulls
showed; the grant's bytes are reserved; the pull asks the service for at most that many
groups (PullLogs `count`). When the answer is in, the reservation is settled to the bytes
actually received; when the batch is finished they are released.

Invariants:

1. A grant is made only when its reservation fits in what is left: the bytes reserved or held
   never exceed `limit` because of a grant.
2. Progress: when nothing at all is reserved or held, a shard is always granted at least one
   log group (its reservation clamped to `limit`), however large its groups are.
3. Held bytes only exceed `limit` by what the service sent beyond the estimates of the pulls
   in flight (a pull asking for N groups of the estimated size that got larger groups). The
   estimate is conservative (the largest of the shard's recent averages), and the next grant
   waits until the excess is released.

How many groups a shard asks for also follows what its pulls bring (a slow start): a pull
that got all it asked for doubles the next ask, one that got fewer asks for twice what it got
(at least `MIN_ASK`), one the service cut by size asks for what it got. A shard that is
caught up, or idle, then reserves little for each poll, and the budget goes to the shards
that are behind; no shard reserves much more than an answer can bring.

No I/O, no clock: the asynchronous shell that waits for room is
`loghubd.consumer.budget.ByteBudget`.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

# Bytes per log group assumed before any pull of the source has shown the real figure. A
# first pull may then ask for up to `limit / INITIAL_GROUP_BYTES` groups; the service's own
# per-pull size cap bounds what an underestimate can cost.
INITIAL_GROUP_BYTES = 64 * 1024
# How many recent pulls of a shard its estimate looks at (the largest average of them wins).
RECENT_PULLS = 4
# The fewest log groups a pull asks for (unless the budget has less room), and the first ask
# of a shard: full answers double it from there.
MIN_ASK = 4


@dataclass(frozen=True, slots=True)
class Grant:
    """Room reserved for one pull: ask for at most `groups` log groups."""

    shard: int
    groups: int
    reserved: int  # bytes


class InFlightBytes:
    """The reservations of one source's shards against `limit` bytes (see the module doc)."""

    def __init__(self, limit: int, *, initial_group_bytes: int = INITIAL_GROUP_BYTES) -> None:
        if limit <= 0:
            raise ValueError(f"limit must be > 0, got {limit}")
        self.limit = limit
        self.held = 0  # bytes reserved for pulls in flight plus bytes of unfinished batches
        self._initial = float(initial_group_bytes)
        self._recent: dict[int, deque[float]] = {}  # shard → recent bytes per log group
        self._last = 0.0  # bytes per group of the source's latest non-empty pull
        self._ask: dict[int, int] = {}  # shard → groups its next pull asks for at most

    @property
    def free(self) -> int:
        return max(0, self.limit - self.held)

    def group_bytes(self, shard: int) -> float:
        """The estimated bytes of one log group of `shard`: the largest of its recent pulls'
        averages, else the source's latest, else `initial_group_bytes`."""
        recent = self._recent.get(shard)
        if recent:
            return max(recent)
        return self._last or self._initial

    def grant(self, shard: int, max_groups: int) -> Grant | None:
        """Reserve room for a pull of `shard`, or None: wait until something is released."""
        if max_groups < 1:
            raise ValueError(f"max_groups must be >= 1, got {max_groups}")
        per_group = max(1.0, self.group_bytes(shard))
        want = min(max_groups, self._ask.get(shard, MIN_ASK))
        groups = min(want, int(self.free // per_group))
        if groups >= 1:
            reserved = math.ceil(groups * per_group)
        elif self.held == 0:  # invariant 2: nothing else can free room, so one group goes
            groups, reserved = 1, min(self.limit, math.ceil(per_group))
        else:
            return None
        self.held += reserved
        return Grant(shard, groups, reserved)

    def settle(self, grant: Grant, groups: int, nbytes: int, *, capped: bool = False) -> int:
        """The pull of `grant` consumed `groups` log groups of its count (with a query: the
        groups scanned) and brought `nbytes` bytes: those are now held instead of the
        reservation (released later with `release(nbytes)`). Returns `nbytes`. Call it for
        failed pulls and for answers that make no batch too, with `nbytes` = 0. `capped`: the
        service cut the answer by size, so the shard is behind but asking for more groups
        would only reserve room that no answer fills: the next ask is what this one got."""
        if groups < 0 or nbytes < 0:
            raise ValueError(f"negative pull size: {groups} groups, {nbytes} bytes")
        self.held += nbytes - grant.reserved
        if capped:
            ask = groups
        elif groups >= grant.groups:  # full: behind, ask for more
            ask = 2 * grant.groups
        else:  # caught up: room for twice what came
            ask = 2 * groups
        self._ask[grant.shard] = max(MIN_ASK, ask)
        if groups and nbytes:  # a pull its query filtered to nothing tells nothing of sizes
            recent = self._recent.setdefault(grant.shard, deque(maxlen=RECENT_PULLS))
            recent.append(nbytes / groups)
            self._last = nbytes / groups
        return nbytes

    def release(self, nbytes: int) -> None:
        """A batch of `nbytes` (as settled) is finished or dropped."""
        if nbytes < 0 or nbytes > self.held:
            raise ValueError(f"release of {nbytes} bytes with {self.held} held")
        self.held -= nbytes

    def forget(self, shard: int) -> None:
        """The shard is no longer consumed here: drop its estimate."""
        self._recent.pop(shard, None)
        self._ask.pop(shard, None)
