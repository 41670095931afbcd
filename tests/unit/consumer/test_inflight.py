"""The in-flight byte budget's pure core (`InFlightBytes`): table cases, then random pull
sizes and processing orders against its invariants (hypothesis prints the falsifying example
and its seed)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loghubd.consumer.inflight import MIN_ASK, Grant, InFlightBytes

KIB = 1024


def ramp(budget: InFlightBytes, shard: int, group_bytes: int, asks: int) -> None:
    """`asks` full pulls of `shard` (each doubles its next ask), all released."""
    for _ in range(asks):
        grant = budget.grant(shard, 1000)
        assert grant is not None
        budget.release(budget.settle(grant, grant.groups, grant.groups * group_bytes))


def test_a_shard_starts_small_and_full_answers_double_its_ask() -> None:
    budget = InFlightBytes(100 * 1024 * KIB, initial_group_bytes=10 * KIB)
    asks = []
    for _ in range(10):
        grant = budget.grant(0, 1000)
        assert grant is not None
        asks.append(grant.groups)
        budget.release(budget.settle(grant, grant.groups, grant.groups * 10 * KIB))
    assert asks == [MIN_ASK * 2**i for i in range(8)] + [1000, 1000]


def test_a_caught_up_shard_asks_for_twice_what_it_got() -> None:
    budget = InFlightBytes(100 * 1024 * KIB, initial_group_bytes=10 * KIB)
    ramp(budget, 0, 10 * KIB, 6)
    grant = budget.grant(0, 1000)
    assert grant is not None and grant.groups == MIN_ASK * 2**6
    budget.release(budget.settle(grant, 5, 5 * 10 * KIB))
    grant = budget.grant(0, 1000)
    assert grant is not None and grant.groups == 10
    budget.settle(grant, 0, 0)  # idle
    assert budget.grant(0, 1000) == Grant(0, MIN_ASK, MIN_ASK * 10 * KIB)


def test_an_answer_cut_by_size_sets_the_next_ask_to_what_it_brought() -> None:
    budget = InFlightBytes(1024 * 1024 * KIB, initial_group_bytes=40 * KIB)
    ramp(budget, 0, 40 * KIB, 8)
    grant = budget.grant(0, 1000)
    assert grant is not None and grant.groups == 1000
    budget.release(budget.settle(grant, 400, 400 * 40 * KIB, capped=True))
    again = budget.grant(0, 1000)
    assert again == Grant(0, 400, 400 * 40 * KIB)


def test_a_grant_asks_for_what_fits_at_the_estimated_group_size() -> None:
    budget = InFlightBytes(100 * KIB, initial_group_bytes=10 * KIB)
    ramp(budget, 0, 10 * KIB, 2)  # its ask is now 16 groups, room for 10
    grant = budget.grant(0, 1000)
    assert grant == Grant(0, 10, 100 * KIB)
    assert budget.grant(1, 1000) is None  # spent: wait


def test_fewer_groups_when_little_is_left() -> None:
    budget = InFlightBytes(100 * KIB, initial_group_bytes=10 * KIB)
    ramp(budget, 1, 10 * KIB, 2)
    first = budget.grant(0, 7)
    assert first is not None and first.groups == MIN_ASK
    second = budget.grant(1, 1000)
    assert second == Grant(1, 6, 60 * KIB)


def test_settling_learns_the_group_size_and_holds_the_real_bytes() -> None:
    budget = InFlightBytes(100 * KIB, initial_group_bytes=10 * KIB)
    grant = budget.grant(0, 5)
    assert grant is not None
    held = budget.settle(grant, 4, 4 * 2 * KIB)  # groups were 2 KiB, not 10
    assert (held, budget.held) == (8 * KIB, 8 * KIB)
    assert budget.group_bytes(0) == 2 * KIB
    assert budget.group_bytes(9) == 2 * KIB  # a shard never pulled uses the source's figure
    again = budget.grant(0, 1000)
    assert again is not None and again.groups == 2 * MIN_ASK
    assert again.reserved == 2 * MIN_ASK * 2 * KIB
    budget.release(held)
    assert budget.held == again.reserved


def test_the_estimate_is_the_largest_recent_average() -> None:
    budget = InFlightBytes(10_000 * KIB)
    for size in (1 * KIB, 8 * KIB, 2 * KIB):
        grant = budget.grant(3, 10)
        assert grant is not None
        budget.release(budget.settle(grant, 10, 10 * size))
    assert budget.group_bytes(3) == 8 * KIB
    for _ in range(4):  # the large pull falls out of the window
        grant = budget.grant(3, 10)
        assert grant is not None
        budget.release(budget.settle(grant, 10, 10 * KIB))
    assert budget.group_bytes(3) == 1 * KIB


def test_one_group_larger_than_the_whole_budget_still_goes_when_nothing_is_in_flight() -> None:
    budget = InFlightBytes(10 * KIB, initial_group_bytes=50 * KIB)
    grant = budget.grant(0, 1000)
    assert grant == Grant(0, 1, 10 * KIB)  # one group, reservation clamped to the limit
    assert budget.grant(1, 1000) is None
    budget.release(budget.settle(grant, 1, 50 * KIB))
    assert budget.held == 0
    assert budget.grant(1, 1000) == Grant(1, 1, 10 * KIB)


def test_an_empty_or_failed_pull_gives_the_reservation_back() -> None:
    budget = InFlightBytes(100 * KIB)
    grant = budget.grant(0, 1000)
    assert grant is not None
    assert budget.settle(grant, 0, 0) == 0
    assert budget.held == 0


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda b: b.grant(0, 0), "max_groups"),
        (lambda b: b.release(1), "release of 1 bytes with 0 held"),
        (lambda b: InFlightBytes(0), "limit must be > 0"),
    ],
)
def test_misuse_is_refused(call: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call(InFlightBytes(KIB))  # type: ignore[operator]


# -- random pulls and processing orders ---------------------------------------------------


@dataclass
class Model:
    """What the shell does with the budget: grants in flight, batches held, in any order."""

    budget: InFlightBytes
    pulls: list[Grant] = field(default_factory=list)
    batches: list[tuple[int, int]] = field(default_factory=list)  # (bytes, excess)

    def check(self) -> None:
        b = self.budget
        reserved = sum(g.reserved for g in self.pulls)
        assert b.held == reserved + sum(n for n, _ in self.batches)
        # Beyond the limit only by what the service sent past the estimates.
        assert b.held <= b.limit + sum(excess for _, excess in self.batches)


ops = st.lists(
    st.tuples(
        st.sampled_from(["grant", "settle", "release"]),
        st.integers(0, 7),  # shard
        st.integers(0, 10**6),  # picks which pull / batch, and sizes
    ),
    max_size=120,
)


@settings(max_examples=300, print_blob=True)
@given(
    limit=st.integers(1, 4 * 1024 * KIB),
    initial=st.integers(1, 256 * KIB),
    max_groups=st.integers(1, 1000),
    group_bytes=st.lists(st.integers(1, 512 * KIB), min_size=8, max_size=8),
    script=ops,
)
def test_reservations_never_exceed_the_limit(
    limit: int,
    initial: int,
    max_groups: int,
    group_bytes: list[int],
    script: list[tuple[str, int, int]],
) -> None:
    """Random pull sizes (each shard's groups vary around its own size) and any order of
    grants, answers and finished batches."""
    m = Model(InFlightBytes(limit, initial_group_bytes=initial))
    b = m.budget
    for op, shard, pick in script:
        if op == "grant":
            before = b.held
            grant = b.grant(shard, max_groups)
            if grant is None:
                assert before > 0, "nothing in flight, yet no grant: no progress"
                assert b.held == before
            else:
                assert 1 <= grant.groups <= max_groups
                assert before + grant.reserved <= limit, (before, grant)
                m.pulls.append(grant)
        elif op == "settle" and m.pulls:
            grant = m.pulls.pop(pick % len(m.pulls))
            got = pick % (grant.groups + 1)  # the service may send fewer groups
            size = group_bytes[grant.shard] * (1 + pick % 3) // 2  # 0.5x .. 1.5x the usual
            nbytes = got * max(1, size)
            held = b.settle(grant, got, nbytes, capped=pick % 5 == 0)
            if got:  # an empty answer makes no batch
                m.batches.append((held, max(0, held - grant.reserved)))
        elif op == "release" and m.batches:
            nbytes, _ = m.batches.pop(pick % len(m.batches))
            b.release(nbytes)
        m.check()
    for grant in m.pulls:
        b.settle(grant, 0, 0)
    for nbytes, _ in m.batches:
        b.release(nbytes)
    assert b.held == 0


@settings(max_examples=200, print_blob=True)
@given(
    limit=st.integers(1, 4 * 1024 * KIB),
    group=st.integers(1, 512 * KIB),
    max_groups=st.integers(1, 1000),
    script=ops,
)
def test_with_steady_group_sizes_held_bytes_stay_within_the_limit(
    limit: int, group: int, max_groups: int, script: list[tuple[str, int, int]]
) -> None:
    """Groups of one size (and a first estimate not below it): the bound holds exactly,
    except a single group larger than the whole budget, alone in flight."""
    m = Model(InFlightBytes(limit, initial_group_bytes=group))
    b = m.budget
    for op, shard, pick in script:
        if op == "grant":
            grant = b.grant(shard, max_groups)
            if grant is not None:
                m.pulls.append(grant)
        elif op == "settle" and m.pulls:
            grant = m.pulls.pop(pick % len(m.pulls))
            got = pick % (grant.groups + 1)
            held = b.settle(grant, got, got * group)
            if got:
                m.batches.append((held, 0))
        elif op == "release" and m.batches:
            b.release(m.batches.pop(pick % len(m.batches))[0])
        if group <= limit:
            assert b.held <= limit, (b.held, limit)
        else:
            assert len(m.pulls) + len(m.batches) <= 1
