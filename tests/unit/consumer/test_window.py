"""Bounded runs: when a position counts as the end of the window."""

from __future__ import annotations

import pytest

from loghubd.consumer.window import reached
from loghubd.protocol import cursor as cursors


@pytest.mark.parametrize(
    ("cursor", "end", "expected"),
    [
        (cursors.encode(10), cursors.encode(10), True),
        (cursors.encode(11), cursors.encode(10), True),  # an older checkpoint past the end
        (cursors.encode(9), cursors.encode(10), False),
        ("opaque", "opaque", True),  # not a base64 decimal: only equality counts
        ("opaque", cursors.encode(10), False),
    ],
)
def test_reached(cursor: str, end: str, expected: bool) -> None:
    assert reached(cursor, end) is expected
