"""The pause before a shard's next pull (loghubd.consumer.pacing): table and properties."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loghubd.consumer.pacing import pause_before_next_pull as pause


@pytest.mark.parametrize(
    ("fill", "empty", "fetch", "idle", "expected"),
    [
        # Something arrived: the unfilled share of fetch_interval, whatever idle says.
        (0.5, 0, 0.2, 1.0, 0.1),
        (0.001, 0, 0.2, 1.0, 0.2 * 0.999),
        (1.0, 0, 0.2, 1.0, 0.0),
        # Nothing arrived: fetch_interval, then doubling up to idle_fetch_interval.
        (0.0, 1, 0.2, 1.0, 0.2),
        (0.0, 2, 0.2, 1.0, 0.4),
        (0.0, 3, 0.2, 1.0, 0.8),
        (0.0, 4, 0.2, 1.0, 1.0),
        (0.0, 10_000, 0.2, 1.0, 1.0),
        # idle_fetch_interval not above fetch_interval: no back-off (the old pacing).
        (0.0, 5, 0.2, 0.2, 0.2),
        (0.0, 5, 0.2, 0.0, 0.2),
        # fetch_interval 0 (never pause) stays 0.
        (0.0, 7, 0.0, 1.0, 0.0),
    ],
)
def test_pause_table(fill: float, empty: int, fetch: float, idle: float, expected: float) -> None:
    assert pause(fill, empty, fetch, idle) == pytest.approx(expected)


intervals = st.floats(min_value=0.0, max_value=60.0, allow_nan=False)


@settings(max_examples=300)
@given(
    fill=st.floats(min_value=0.0, max_value=1.0),
    empty=st.integers(min_value=0, max_value=10**9),
    fetch=intervals,
    idle=intervals,
)
def test_pause_is_bounded_and_grows_with_each_empty_pull(
    fill: float, empty: int, fetch: float, idle: float
) -> None:
    now = pause(fill, empty, fetch, idle)
    assert 0.0 <= now <= max(fetch, idle)  # never longer than the larger of the two
    if empty:
        assert now >= fetch  # an empty pull never hurries
        assert pause(fill, empty + 1, fetch, idle) >= now  # and the next one waits as long
    else:
        assert now <= fetch  # data keeps the old pace


@given(fetch=st.floats(min_value=0.001, max_value=10.0), idle=intervals)
def test_a_quiet_shard_reaches_idle_fetch_interval(fetch: float, idle: float) -> None:
    assert pause(0.0, 64, fetch, idle) == max(fetch, idle)
