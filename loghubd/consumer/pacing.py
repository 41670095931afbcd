"""How long a shard's fetcher pauses before its next pull. No I/O.

- Behind (the last pull was full): no pause; the caller pulls again at once.
- Something arrived: `fetch_interval` scaled by how empty the pull was, so a shard that gets
  a steady trickle is read about every `fetch_interval`.
- Nothing arrived: the pause doubles with each empty pull in a row, from `fetch_interval` up to
  `idle_fetch_interval`. A quiet shard then costs a pull every `idle_fetch_interval` (an idle
  8-shard daemon polling every 0.2 s used 6 % of a core here, and its server as much again),
  and the first log after a quiet spell waits at most that long. Its default, 0.5 s, is the
  official SDKs' pace after a pull of few or no log groups: no later than theirs. An
  `idle_fetch_interval` not above `fetch_interval` keeps the pause at `fetch_interval`.
"""

from __future__ import annotations


def pause_before_next_pull(
    fill: float, empty_in_a_row: int, fetch_interval: float, idle_fetch_interval: float
) -> float:
    """Seconds to wait. `fill`: the last pull's log groups over the most asked for (0..1);
    `empty_in_a_row`: pulls that brought nothing, the last one included (0 if it brought
    something)."""
    if empty_in_a_row <= 0:
        return fetch_interval * (1.0 - min(max(fill, 0.0), 1.0))
    cap = max(idle_fetch_interval, fetch_interval)
    # 2**n overflows a float long before a quiet shard's count could get there: stop early.
    doublings = min(empty_in_a_row - 1, 62)
    return min(cap, fetch_interval * 2.0**doublings)
