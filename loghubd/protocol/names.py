"""Resource names: projects, logstores and consumer groups.

`loghubd serve` accepts a name of 2 to 128 ASCII letters, digits, `_` and `-`. The cloud
service is stricter (projects and logstores: 3 to 63 characters, lower case), so a name this
rule refuses is refused everywhere: the config check applies it, and a daemon never gets as
far as asking a service about a name that cannot exist.
"""

from __future__ import annotations

import re

MIN_LENGTH, MAX_LENGTH = 2, 128
_ALLOWED = re.compile(r"[A-Za-z0-9_-]*")


def name_problem(name: str) -> str | None:
    """Why `name` cannot be a project, logstore or consumer group name; None if it can."""
    if not MIN_LENGTH <= len(name) <= MAX_LENGTH:
        return f"must be {MIN_LENGTH} to {MAX_LENGTH} characters long, got {len(name)}"
    if not _ALLOWED.fullmatch(name):
        return "may contain only ASCII letters, digits, _ and -"
    return None
