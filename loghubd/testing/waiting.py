"""Polling for tests that drive real processes: wait until a condition holds, or fail."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T],
    timeout: float,
    message: str | Callable[[], str] = "condition not met",
    interval: float = 0.05,
) -> T:
    """Call `predicate` every `interval` seconds until it returns something truthy, and
    return that value. After `timeout` seconds raise AssertionError with `message` (a callable
    is called then, e.g. to attach the tail of a process log)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            text = message() if callable(message) else message
            raise AssertionError(f"timed out after {timeout:.1f}s: {text}")
        time.sleep(interval)
