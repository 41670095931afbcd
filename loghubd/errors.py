"""Exceptions as people read them: the leaves of (nested) exception groups, and one line that
names what went wrong (with the path an OSError is about).

Task groups wrap a single failure in an `ExceptionGroup`; its repr ("unhandled errors in a
TaskGroup") tells an operator nothing, so logs, `/readyz` and `/status` describe the leaves.
"""

from __future__ import annotations


def leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups, or [exc]."""
    if isinstance(exc, BaseExceptionGroup):
        out: list[BaseException] = []
        for inner in exc.exceptions:
            out += leaves(inner)
        return out
    return [exc]


def describe_error(exc: BaseException) -> str:
    """`repr` of each leaf exception, joined by "; ", plus the file an OSError is about when
    its text lacks it (`FileNotFoundError(2, 'No such file or directory')` names no path)."""
    return "; ".join(_describe_one(e) for e in leaves(exc))


def _describe_one(exc: BaseException) -> str:
    text = repr(exc)
    if isinstance(exc, OSError):
        for name in (exc.filename, exc.filename2):
            if name is not None and str(name) not in text:
                text += f" (path {name})"
    return text
