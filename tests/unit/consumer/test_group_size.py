"""Logs per log group, lately (loghubd/consumer/group_size.py): a mean weighted by log groups
that forgets per group, so one early batch of big groups does not outweigh many later
batches of small ones (on-call audit: `loghubd_lag_logs` read 5.5 times too high).
Hypothesis prints a reproducing example when a property fails."""

from __future__ import annotations

import math
from functools import reduce

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loghubd.consumer.group_size import HALF_LIFE_GROUPS, GroupSize, observe


def after(batches: list[tuple[int, int]], size: GroupSize | None = None) -> GroupSize:
    """`size` (none read yet by default) after `(logs, groups)` batches, in order."""
    return reduce(lambda s, b: observe(s, *b), batches, size or GroupSize())


@pytest.mark.parametrize(
    ("batches", "mean"),
    [
        ([], None),
        ([(0, 0)], None),  # a batch without groups teaches nothing
        ([(500, 5)], 100.0),  # the first batch alone
        # one batch of ten groups or ten batches of one: the same
        ([(100, 10)], 10.0),
        ([(10, 1)] * 10, 10.0),
        ([(100, 10), (0, 0), (100, 10)], 10.0),
    ],
)
def test_means(batches: list[tuple[int, int]], mean: float | None) -> None:
    assert after(batches).mean == (None if mean is None else pytest.approx(mean))


def test_groups_weigh_by_number_not_by_batch() -> None:
    # 5 groups of 100, then 3 of 10: the five weigh more (not 0.8 / 0.2 per batch)...
    got = after([(500, 5), (30, 3)]).mean
    assert got is not None and 55.0 < got < 100.0, got
    # ...and 50 groups of 10 after them outweigh them, in one batch or in many.
    for small in ([(500, 50)], [(10, 1)] * 50):
        got = after([(500, 5), *small]).mean
        assert got is not None and 10.0 < got < 25.0, got


def test_the_audit_case_an_early_batch_of_big_groups_is_forgotten_per_group() -> None:
    # 5 groups of 100 logs first (the initial `produce`), then 10-log groups a few at a time.
    # The old per-batch average was still 55 after 10 such batches (0.8**10 of 100, ...).
    small = [(30, 3)] * 40  # 120 groups of 10: almost four half-lives
    got = after([(500, 5), *small]).mean
    assert got is not None and got < 11.0, got
    # A half-life later the early groups weigh half of what they did.
    first = after([(500, 5)])
    later = observe(first, 0, int(HALF_LIFE_GROUPS))
    assert later.logs == pytest.approx(first.logs / 2)


def test_a_batch_without_groups_changes_nothing() -> None:
    size = after([(500, 5)])
    assert observe(size, 0, 0) is size


batch = st.tuples(st.integers(1, 200), st.integers(1, 100)).map(lambda t: (t[0] * t[1], t[1]))


@given(st.lists(batch, min_size=1, max_size=30))
def test_the_mean_stays_between_the_smallest_and_largest_batch_means(
    batches: list[tuple[int, int]],
) -> None:
    got = after(batches).mean
    means = [logs / groups for logs, groups in batches]
    assert got is not None
    assert min(means) - 1e-9 <= got <= max(means) + 1e-9


@given(
    st.lists(batch, max_size=10),
    st.integers(1, 100),
    st.integers(0, 200),
    st.lists(st.integers(1, 20), min_size=1, max_size=8),
)
def test_how_groups_of_one_size_came_in_batches_does_not_matter(
    before: list[tuple[int, int]], groups: int, per_group: int, cuts: list[int]
) -> None:
    """`groups` groups of `per_group` logs in one batch, or cut into smaller batches: the
    same estimate (the weight forgets per group, not per batch)."""
    whole = after([(groups * per_group, groups)], after(before))
    pieces, left = [], groups
    for cut in cuts:
        if left == 0:
            break
        n = min(cut, left)
        pieces.append((n * per_group, n))
        left -= n
    if left:
        pieces.append((left * per_group, left))
    cut_up = after(pieces, after(before))
    assert math.isclose(whole.logs, cut_up.logs, rel_tol=1e-9, abs_tol=1e-9)
    assert math.isclose(whole.groups, cut_up.groups, rel_tol=1e-9)


@given(st.lists(batch, max_size=10), st.integers(0, 200))
def test_enough_groups_of_one_size_bring_the_mean_to_it(
    before: list[tuple[int, int]], per_group: int
) -> None:
    """Ten half-lives of groups of one size: what came before weighs under 1/1000 of it."""
    groups = int(10 * HALF_LIFE_GROUPS)
    got = after([(groups * per_group, groups)], after(before)).mean
    assert got is not None
    largest = max([per_group, *(logs / g for logs, g in before)])
    assert abs(got - per_group) <= largest / 1000 + 1e-9
