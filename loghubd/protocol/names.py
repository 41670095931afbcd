"""Resource names: projects, logstores and consumer groups.

`loghubd serve` accepts a name of 2 to 128 ASCII letters, digits, `_` and `-`. The cloud
service is stricter (projects and logstores: 3 to 63 characters, lower case), so a name this
rule refuses is refused everywhere: the config check applies it, and a daemon never gets as
far as asking a service about a name that cannot exist.

`sls_name_problem` is the cloud's own rule for projects and logstores, as Alibaba Cloud
documents it (CreateProject, CreateLogStore). `loghubd serve` does not refuse by it (tests
and demos use short names such as `ls`), but says so when a project or logstore is created
with a name the cloud would refuse: a setup built against `serve` should not meet that
refusal for the first time in production.
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


SLS_MIN_LENGTH, SLS_MAX_LENGTH = 3, 63
_SLS_ALLOWED = {
    "project": (re.compile(r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?"), "lower-case letters, digits and -"),
    "logstore": (
        re.compile(r"[a-z0-9](?:[a-z0-9_-]*[a-z0-9])?"),
        "lower-case letters, digits, _ and -",
    ),
}


def sls_name_problem(kind: str, name: str) -> str | None:
    """Why Alibaba Cloud's SLS refuses `name` as a `kind` ("project" or "logstore") name;
    None if it accepts it (or for other kinds, which it is not known to restrict further)."""
    rule = _SLS_ALLOWED.get(kind)
    if rule is None:
        return None
    pattern, allowed = rule
    if not SLS_MIN_LENGTH <= len(name) <= SLS_MAX_LENGTH:
        return f"must be {SLS_MIN_LENGTH} to {SLS_MAX_LENGTH} characters long, got {len(name)}"
    if not pattern.fullmatch(name):
        return f"may contain only {allowed}, and must start and end with a letter or digit"
    return None
