"""How many logs a log group holds, lately: what turns a lag in log groups into a lag in logs
(`loghubd_lag_logs`). Pure: no clock, no I/O.

The mean is weighted by log groups and forgets per log group, not per batch: each group read
after another weighs 2**(1/HALF_LIFE_GROUPS) times as much as it (twice as much after
`HALF_LIFE_GROUPS` groups). A batch's groups are taken to be of its mean size, so how the
groups came in batches does not matter. It used to be an average over batches (0.8 old,
0.2 new per batch): one early batch of 100-log groups outweighed many later batches of
10-log groups, and the lag in logs read 5.5 times too high (on-call audit).
"""

from __future__ import annotations

from dataclasses import dataclass

# After this many log groups read, what was read before weighs half. Short, because the
# unread groups are newer than anything read: a backlog's batch of tens of groups replaces
# what came before, and a tail of one group per batch learns a new size within ~8 batches.
HALF_LIFE_GROUPS = 8.0


@dataclass(frozen=True, slots=True)
class GroupSize:
    """Decayed sums of the logs and of the log groups read (a group's weight is 1 when read,
    halved every `half_life` groups read after it)."""

    logs: float = 0.0
    groups: float = 0.0

    @property
    def mean(self) -> float | None:
        """Logs per log group, lately; None before any group was read."""
        return self.logs / self.groups if self.groups > 0 else None


def observe(
    size: GroupSize, logs: int, groups: int, *, half_life: float = HALF_LIFE_GROUPS
) -> GroupSize:
    """`size` after a batch of `groups` log groups holding `logs` logs.

    What was read before decays by `d**groups` (d = 2**(-1/half_life)); the batch's own
    groups weigh d**0 + d**1 + ... + d**(groups - 1), the newest most, as if read one by one.
    A batch without groups (nothing to learn from) changes nothing.
    """
    if groups <= 0:
        return size
    d = 0.5 ** (1.0 / half_life)
    old = d**groups
    weight = (1.0 - old) / (1.0 - d)  # the batch's groups, each decayed as read in turn
    return GroupSize(
        logs=size.logs * old + logs / groups * weight,
        groups=size.groups * old + weight,
    )
