"""Pattern matching: SQL LIKE (`%`, `_`) for `like`, and the `*` field patterns of
`project -wildcard` / `project-away -wildcard`. Both are a run of fixed-length segments
separated by "any run of characters", matched by `segments_match`."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import TypeAlias

# A segment between two "any run" wildcards: its length, and a literal or a `_`-regex.
Segment: TypeAlias = tuple[int, "str | re.Pattern[str]"]


@functools.lru_cache(maxsize=1024)
def _like_plan(pattern: str) -> tuple[Segment, ...]:
    """The `%`-separated segments of a LIKE pattern: (length, literal or `_`-regex)."""
    plan: list[Segment] = []
    for part in pattern.split("%"):
        if "_" in part:
            body = "".join("." if ch == "_" else re.escape(ch) for ch in part)
            plan.append((len(part), re.compile(body, re.DOTALL)))
        else:
            plan.append((len(part), part))
    return tuple(plan)


def _at(seg: str | re.Pattern[str], text: str, pos: int) -> bool:
    if isinstance(seg, str):
        return text.startswith(seg, pos)
    return seg.match(text, pos) is not None


def segments_match(text: str, plan: Sequence[Segment]) -> bool:
    """Whether `text` is the segments of `plan` separated by any runs of characters.

    The segments have fixed lengths, so the first is matched at the start, the last at the
    end and the middle ones leftmost in order (greedy is exact here): no backtracking,
    C-speed searches."""
    if len(plan) == 1:
        size, seg = plan[0]
        return len(text) == size and _at(seg, text, 0)
    (first_len, first), (last_len, last) = plan[0], plan[-1]
    start, stop = first_len, len(text) - last_len
    if stop < start or not _at(first, text, 0) or not _at(last, text, stop):
        return False
    for size, seg in plan[1:-1]:
        if isinstance(seg, str):
            found = text.find(seg, start, stop)
        else:
            m = seg.search(text, start, stop)
            found = -1 if m is None else m.start()
        if found < 0:
            return False
        start = found + size
    return True


def like(text: str, pattern: str) -> bool:
    """SQL LIKE: `%` any run, `_` any one character, case-sensitive, whole string."""
    return segments_match(text, _like_plan(pattern))


def glob_plan(pattern: str) -> tuple[Segment, ...]:
    """The segments of a field pattern of `project -wildcard`, where `*` matches any run of
    characters (and nothing else is special), for `segments_match`."""
    return tuple((len(part), part) for part in pattern.split("*"))
