"""`Backoff`: the waits of every retry loop (table of the loops' own figures + properties)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loghubd.backoff import Backoff

LOOPS = [
    # name, backoff, failures → expected ceilings (the formulas each loop had before)
    ("credentials command", Backoff(initial=1.0, cap=30.0), [1, 2, 4, 8, 16, 30, 30]),
    ("start-up calls", Backoff(initial=1.0, cap=30.0), [1, 2, 4, 8, 16, 30, 30]),
    ("pulls", Backoff(initial=0.4, cap=30.0), [0.4, 0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30]),
    ("processor", Backoff(initial=0.5, cap=30.0, jitter=0.5), [0.5, 1, 2, 4, 8, 16, 30]),
    ("one SLS call", Backoff(initial=0.1, cap=2.0, jitter=1.0), [0.1, 0.2, 0.4, 0.8, 1.6, 2]),
    ("cap below initial", Backoff(initial=0.4, cap=0.02), [0.02, 0.02, 0.02]),
    ("factor 1", Backoff(initial=3.0, cap=10.0, factor=1.0), [3, 3, 3]),
    ("factor 3", Backoff(initial=1.0, cap=50.0, factor=3.0), [1, 3, 9, 27, 50]),
]


@pytest.mark.parametrize(("name", "backoff", "ceilings"), LOOPS, ids=[row[0] for row in LOOPS])
def test_ceilings(name: str, backoff: Backoff, ceilings: list[float]) -> None:
    got = [backoff.ceiling(n) for n in range(1, len(ceilings) + 1)]
    assert got == pytest.approx(ceilings), name


@pytest.mark.parametrize(
    ("jitter", "rand", "expected"),
    [
        (0.0, 0.99, 8.0),  # no jitter: always the ceiling
        (1.0, 0.0, 8.0),  # full jitter: anywhere in (0, ceiling]
        (1.0, 0.75, 2.0),
        (0.5, 0.0, 8.0),  # half jitter: within [ceiling / 2, ceiling]
        (0.5, 0.5, 6.0),
        (0.5, 0.999999, 4.000004),
    ],
)
def test_jitter_takes_a_random_part_of_the_ceiling(
    jitter: float, rand: float, expected: float
) -> None:
    backoff = Backoff(initial=1.0, cap=30.0, jitter=jitter)
    assert backoff.wait(4, rand=lambda: rand) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"initial": 0.0, "cap": 1.0}, "must be > 0"),
        ({"initial": 1.0, "cap": -1.0}, "must be > 0"),
        ({"initial": 1.0, "cap": 2.0, "factor": 0.5}, "factor"),
        ({"initial": 1.0, "cap": 2.0, "jitter": 1.5}, "jitter"),
    ],
)
def test_nonsense_is_refused(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Backoff(**kwargs)


positive = st.floats(min_value=1e-3, max_value=1e4, allow_nan=False)


@given(
    initial=positive,
    cap=positive,
    factor=st.floats(min_value=1.0, max_value=10.0),
    jitter=st.floats(min_value=0.0, max_value=1.0),
    failures=st.integers(min_value=1, max_value=10_000),
    rand=st.floats(min_value=0.0, max_value=1.0, exclude_max=True),
)
def test_waits_are_bounded_and_grow(
    initial: float, cap: float, factor: float, jitter: float, failures: int, rand: float
) -> None:
    backoff = Backoff(initial=initial, cap=cap, factor=factor, jitter=jitter)
    ceiling = backoff.ceiling(failures)
    # Never above the cap nor the first wait's bound, never shrinking, never overflowing.
    assert 0 < ceiling <= max(cap, 0) + 1e-9
    assert ceiling <= max(initial, cap)
    assert backoff.ceiling(failures + 1) >= ceiling
    wait = backoff.wait(failures, rand=lambda: rand)
    assert ceiling * (1 - jitter) - 1e-9 <= wait <= ceiling + 1e-9
    assert wait > 0 or jitter == 1.0
