"""Fault episodes (loghubd/faults.py): one `*_recovered` line per run of failures."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from loghubd.faults import Episode


def test_an_ordinary_success_says_nothing() -> None:
    e = Episode()
    assert e.recovered(1.0) is None
    assert e.recovered(2.0) is None


def test_the_first_success_after_failures_says_how_many_and_how_long_once() -> None:
    e = Episode()
    e.failed(10.0)
    e.failed(12.5)
    e.failed(20.0)
    assert e.failing_since == 10.0  # what /status's pull_failing_for_s counts from
    assert e.recovered(21.25) == {"failures": 3, "failing_for_s": 11.25}
    assert e.failing_since is None
    assert e.recovered(22.0) is None
    e.failed(30.0)  # a new episode counts from its own first failure
    assert e.recovered(31.0) == {"failures": 1, "failing_for_s": 1.0}


@given(st.lists(st.booleans(), max_size=60))
def test_one_line_per_run_of_failures(outcomes: list[bool]) -> None:
    """Over any sequence of outcomes (True: success), the lines said are the runs of failures
    ended by a success, each with its length."""
    e, said = Episode(), []
    for t, ok in enumerate(outcomes):
        if ok:
            line = e.recovered(float(t))
            if line is not None:
                said.append(line["failures"])
        else:
            e.failed(float(t))
    runs, run = [], 0
    for ok in outcomes:
        if ok:
            if run:
                runs.append(run)
            run = 0
        else:
            run += 1
    assert said == runs
