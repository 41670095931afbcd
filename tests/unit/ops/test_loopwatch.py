"""`loopwatch.where`: where the loop's thread is, innermost first (the daemon-level behaviour is
tests/integration/test_daemon_shutdown_stuck.py's blocked-loop test)."""

from __future__ import annotations

import sys

from loghubd.ops.loopwatch import where


def _inner() -> str:
    return where(sys._getframe(), depth=2)


def test_where_names_the_innermost_frames_first() -> None:
    spot = _inner()
    first, second = spot.split(" < ")
    assert first.startswith("ops/test_loopwatch.py:") and first.endswith(" in _inner"), spot
    assert second.endswith(" in test_where_names_the_innermost_frames_first"), spot


def test_where_without_a_frame() -> None:
    assert where(None) == "unknown"
