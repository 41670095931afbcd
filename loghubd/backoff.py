"""`Backoff`: the one wait-before-retrying formula of every retry loop of the project.

Exponential growth from `initial` (doubling by default), capped at `cap`, with a `jitter`
fraction of each wait drawn at random so that many retrying tasks (every shard after an
outage, every worker of a fleet) do not retry in step. `jitter=1` is "full jitter" (a wait
anywhere in [0, ceiling]), `0.5` keeps at least half the ceiling, `0` is deterministic.

Who uses which (the figures are each loop's own, kept from before they were unified):

| loop                                                   | initial | cap  | jitter |
|--------------------------------------------------------|---------|------|--------|
| one SLS call's retries inside its deadline (`sls`)     | 0.1 s   | 2 s  | 1      |
| a failing batch (`consumer.retry_initial_backoff`,     | 0.5 s   | 30 s | 0.5    |
|   `consumer.processor_retry_max_backoff`)              |         |      |        |
| pulls, a shard's start position                        | 0.4 s   | 30 s | 0      |
|   (`consumer.pull_retry_max_backoff`)                  |         |      |        |
| start-up calls of a source (group creation)            | 1 s     | 30 s | 0      |
| a failed credentials command (`sls.credentials`)       | 1 s     | 30 s | 0      |

Pure: no I/O, no clock; the random source can be injected.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class Backoff:
    """Waits after the 1st, 2nd ... failure in a row: ``initial * factor ** (failures - 1)``,
    at most `cap` (a cap below `initial` wins from the first wait), of which a `jitter`
    fraction is random."""

    initial: float
    cap: float
    factor: float = 2.0
    jitter: float = 0.0

    def __post_init__(self) -> None:
        if not (self.initial > 0 and self.cap > 0):
            raise ValueError(
                f"Backoff: initial and cap must be > 0, got {self.initial}, {self.cap}"
            )
        if self.factor < 1:
            raise ValueError(f"Backoff: factor must be >= 1, got {self.factor}")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"Backoff: jitter must be within [0, 1], got {self.jitter}")

    def ceiling(self, failures: int) -> float:
        """The longest wait after `failures` (>= 1) failures in a row (no overflow, ever)."""
        exponent = max(0, failures - 1)
        if self.factor == 1 or self.cap <= self.initial:
            return min(self.cap, self.initial)
        # Past this exponent the cap wins anyway; stopping there keeps the power finite.
        room = math.log(self.cap / self.initial, self.factor)
        if exponent >= room:
            return self.cap
        return min(self.cap, self.initial * self.factor**exponent)

    def wait(self, failures: int, rand: Callable[[], float] = random.random) -> float:
        """The wait after `failures` failures in a row: the ceiling less a random part of
        at most `jitter` of it (`rand()` in [0, 1))."""
        ceiling = self.ceiling(failures)
        return ceiling * (1.0 - self.jitter * rand())
