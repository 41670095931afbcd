"""The two ways SPL fails: a statement refused at compile time, or one log failing at run time."""

from __future__ import annotations


class SplError(ValueError):
    """The statement is outside the supported subset (or not SPL at all)."""

    def __init__(self, position: int, reason: str) -> None:
        super().__init__(f"position {position}: {reason}")
        self.position = position
        self.reason = reason


class SplEvalError(Exception):
    """Evaluating the statement on one log failed; that log is dropped and counted."""
