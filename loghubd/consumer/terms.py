"""The consumer group's timeout as the service holds it, and the heartbeat interval that keeps
this daemon inside it. Pure: no I/O, no clock.

A group has one timeout, kept by the service, and any consumer may rewrite it: the official
SDK's `ConsumerWorker` sets it to 2 x its own `heartbeat_interval` whenever it starts, on a
group that exists too. A daemon heartbeating every `consumer.heartbeat_interval` into a group
whose timeout is now shorter is expired between two of its heartbeats: its shards go, come
back on the rejoin, and every log since the last checkpoint is delivered again, though
nothing crashed. So the daemon heartbeats at least three times per group timeout (the
configured interval when that is shorter), and measures its lease against the group's
timeout, not the one it was configured with.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

BEATS_PER_TIMEOUT = 3  # heartbeats per group timeout at the least: two may fail unnoticed
MIN_INTERVAL_S = 0.5  # however short the timeout: a service asking for less is not served


@dataclass(slots=True)
class GroupTerms:
    """What this daemon heartbeats by. `timeout` starts as the configured one and follows
    the service's from the first time it is read (`update`)."""

    configured_interval: float
    timeout: float

    @property
    def interval(self) -> float:
        """Seconds between heartbeats: the configured interval, shortened to a third of the
        group's timeout when that is less (not below MIN_INTERVAL_S)."""
        return min(self.configured_interval, max(MIN_INTERVAL_S, self.timeout / BEATS_PER_TIMEOUT))

    @property
    def adapted(self) -> bool:
        """Whether the group's timeout made the interval shorter than configured."""
        return self.interval < self.configured_interval

    def update(self, timeout: float | None) -> float | None:
        """Take the group's timeout as the service reported it (None: not reported, kept).
        Returns the timeout it replaced when it changed, else None."""
        if timeout is None or timeout == self.timeout:
            return None
        was, self.timeout = self.timeout, timeout
        return was


def group_timeout(groups: Iterable[Mapping[str, Any]], group: str) -> float | None:
    """The timeout (seconds) of `group` in a ListConsumerGroup answer; None when the group
    is not listed or its timeout is not a positive number (a service that does not say)."""
    for entry in groups:
        if entry.get("name") == group:
            timeout = entry.get("timeout")
            if not isinstance(timeout, int | float) or isinstance(timeout, bool):
                return None
            return float(timeout) if 0 < timeout < math.inf else None
    return None
