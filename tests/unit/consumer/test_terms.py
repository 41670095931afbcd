"""The heartbeat interval a group's timeout allows, and the timeout read from a
ListConsumerGroup answer (`loghubd.consumer.terms`)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loghubd.consumer.terms import MIN_INTERVAL_S, GroupTerms, group_timeout


@pytest.mark.parametrize(
    ("configured", "timeout", "interval"),
    [
        (5.0, 15.0, 5.0),  # the defaults: the configured interval is a third already
        (5.0, 60.0, 5.0),  # a longer timeout never lengthens the interval
        (5.0, 4.0, 4 / 3),  # an SDK worker with heartbeat_interval 2 rewrote it to 4
        (5.0, 10.0, 10 / 3),
        (1.0, 4.0, 1.0),  # configured shorter than a third: kept
        (5.0, 1.0, MIN_INTERVAL_S),  # not below the floor
        (0.2, 1.0, 0.2),  # ... unless configured below it
    ],
)
def test_interval_is_at_most_a_third_of_the_timeout(
    configured: float, timeout: float, interval: float
) -> None:
    terms = GroupTerms(configured_interval=configured, timeout=timeout)
    assert terms.interval == pytest.approx(interval)
    assert terms.adapted == (interval < configured)


def test_update_reports_the_timeout_it_replaced() -> None:
    terms = GroupTerms(configured_interval=5.0, timeout=15.0)
    assert terms.update(None) is None and terms.timeout == 15.0  # not reported: kept
    assert terms.update(15.0) is None  # unchanged
    assert terms.update(4.0) == 15.0 and terms.interval == pytest.approx(4 / 3)
    assert terms.update(40.0) == 4.0 and terms.interval == 5.0  # back to the configured one


@given(
    configured=st.floats(min_value=0.01, max_value=3600),
    timeout=st.floats(min_value=0.01, max_value=86400),
)
def test_interval_property(configured: float, timeout: float) -> None:
    interval = GroupTerms(configured_interval=configured, timeout=timeout).interval
    assert interval <= configured
    assert interval >= min(configured, MIN_INTERVAL_S)
    if timeout >= 3 * MIN_INTERVAL_S:  # room for three beats: three fit in the timeout
        assert 3 * interval <= timeout * (1 + 1e-12)


@pytest.mark.parametrize(
    ("groups", "found"),
    [
        ([{"name": "g", "timeout": 4}], 4.0),
        ([{"name": "x", "timeout": 9}, {"name": "g", "timeout": 7.5}], 7.5),
        ([{"name": "x", "timeout": 9}], None),  # not listed
        ([], None),
        ([{"name": "g"}], None),  # a service that does not say
        ([{"name": "g", "timeout": "4"}], None),
        ([{"name": "g", "timeout": True}], None),
        ([{"name": "g", "timeout": 0}], None),
        ([{"name": "g", "timeout": -3}], None),
        ([{"name": "g", "timeout": math.nan}], None),
        ([{"name": "g", "timeout": math.inf}], None),
        ([{"name": "g", "timeout": None}, {"name": "g", "timeout": 4}], None),  # the first
    ],
)
def test_group_timeout_of_a_list_answer(groups: list[dict[str, Any]], found: float | None) -> None:
    assert group_timeout(groups, "g") == found
