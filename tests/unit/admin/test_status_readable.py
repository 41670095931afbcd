"""/status gives positions and lag in readable forms next to the raw cursors (issue #18)."""

from __future__ import annotations

import pytest

from loghubd.ops.views import behind, readable_position
from loghubd.protocol import cursor as cursors


@pytest.mark.parametrize(
    ("shard", "cursor", "text"),
    [
        (0, cursors.from_seq(0, 1234), "log group 1,234"),
        (3, cursors.from_seq(3, 0), "log group 0"),
        (1, "MTU0NzQ3MDY4MjM3NjUxMzQ0Ng==", "log group 1,547,470,682,376,513,446"),  # SLS-like
        (0, "not a cursor", None),
        (0, "", None),
        (0, None, None),
    ],
)
def test_positions(shard: int, cursor: str | None, text: str | None) -> None:
    assert readable_position(shard, cursor) == text


@pytest.mark.parametrize(
    ("groups", "seconds", "caught_up", "failing", "text"),
    [
        (0, 0.0, True, False, "caught up"),
        (5, 3.0, True, False, "caught up"),  # `caught_up` is newer than the last lag probe
        (None, None, False, False, "not measured yet"),
        (1200, 75.4, False, False, "1,200 log groups, oldest unread written 75s ago"),
        (3, None, False, False, "3 log groups"),
        # lag 0 is measured from the fetch position: fetched, not necessarily processed
        (0, 0.0, False, False, "fetched to the end, not all processed yet"),
        # a batch failing over and over is never "caught up", whatever the lag says
        (0, 0.0, False, True, "fetched to the end, processing failing"),
        (0, 0.0, True, True, "fetched to the end, processing failing"),
        (12, 4.2, False, True, "12 log groups, oldest unread written 4s ago, processing failing"),
        (None, None, False, True, "not measured yet, processing failing"),
    ],
)
def test_behind(
    groups: int | None, seconds: float | None, caught_up: bool, failing: bool, text: str
) -> None:
    assert behind(groups, seconds, caught_up, failing=failing) == text
