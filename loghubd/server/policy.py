"""RAM-style access policies for `loghubd serve`: which signed key may do what, on what.

Pure: no I/O, no clock. A policy is a list of statements in the shape of Alibaba Cloud RAM
policies as SLS uses them:

    Statement(effect="Allow", actions=("log:GetCursorOrData",),
              resources=("acs:log:*:*:project/demo/logstore/app",))

Evaluation follows RAM: an explicit `Deny` that matches wins; otherwise any matching `Allow`
allows; otherwise the request is denied. In patterns `*` matches any run of characters
(including `/` and `:`) and `?` exactly one. Action names are compared case-insensitively
(`log:getcursorordata` is `log:GetCursorOrData`), resource names case-sensitively (project and
logstore names are).

Every API of the server maps to one RAM action and one resource (the rows of
`loghubd.server.routes`, documented in the README):
`acs:log:<region>:<account>:project/<p>[/logstore/<l>[/consumergroup/<g>]]`, with region
`local` and the server's account id (`account_id` in the access-keys file, default `0`), so
policies written for SLS (`acs:log:*:*:project/...`) work unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from typing import Literal

REGION = "local"
DEFAULT_ACCOUNT = "0"

Effect = Literal["Allow", "Deny"]
EFFECTS: tuple[Effect, ...] = ("Allow", "Deny")


class PolicyError(ValueError):
    """A policy definition is malformed; the message names the offending field."""


@dataclass(frozen=True, slots=True)
class Statement:
    effect: Effect
    actions: tuple[str, ...]  # patterns: "log:GetCursorOrData", "log:Get*", "*"
    resources: tuple[str, ...]  # patterns: "acs:log:*:*:project/demo/logstore/app*", "*"

    def matches(self, action: str, resource: str) -> bool:
        return any(_pattern(a, True).fullmatch(action) for a in self.actions) and any(
            _pattern(r, False).fullmatch(resource) for r in self.resources
        )


@dataclass(frozen=True, slots=True)
class Policy:
    name: str
    statements: tuple[Statement, ...]


class Decision(Enum):
    ALLOW = "allowed"
    EXPLICIT_DENY = "explicitly denied"
    IMPLICIT_DENY = "not allowed by any statement"


def decide(policy: Policy, action: str, resource: str) -> Decision:
    """RAM semantics: a matching Deny wins, else a matching Allow allows, else deny."""
    allowed = False
    for st in policy.statements:
        if st.matches(action, resource):
            if st.effect == "Deny":
                return Decision.EXPLICIT_DENY
            allowed = True
    return Decision.ALLOW if allowed else Decision.IMPLICIT_DENY


def evaluate(policy: Policy, action: str, resource: str) -> bool:
    return decide(policy, action, resource) is Decision.ALLOW


@lru_cache(maxsize=4096)
def _pattern(pattern: str, ignore_case: bool) -> re.Pattern[str]:
    body = "".join(".*" if ch == "*" else "." if ch == "?" else re.escape(ch) for ch in pattern)
    return re.compile(body, (re.IGNORECASE | re.DOTALL) if ignore_case else re.DOTALL)


# -- definitions (from the access-keys file) ------------------------------------------------

_ACTION_RE = re.compile(r"\*|[A-Za-z0-9*?_-]+:[A-Za-z0-9*?_-]*")


def _patterns(value: object, where: str, kind: str) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        raise PolicyError(f"{where}: required, a non-empty list of {kind} patterns")
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, str) or not item:
            raise PolicyError(f"{where}[{i}]: must be a non-empty string")
        if kind == "action" and not _ACTION_RE.fullmatch(item):
            raise PolicyError(
                f"{where}[{i}]: {item!r} is not an action pattern (`log:<Action>` or `*`)"
            )
        if kind == "resource" and item != "*" and not item.startswith("acs:"):
            raise PolicyError(
                f"{where}[{i}]: {item!r} is not a resource pattern (`acs:log:...` or `*`)"
            )
        out.append(item)
    return tuple(out)


def parse_statement(raw: object, where: str) -> Statement:
    if not isinstance(raw, Mapping):
        raise PolicyError(f"{where}: must be a table with effect, actions and resources")
    unknown = set(raw) - {"effect", "actions", "resources"}
    if unknown:
        raise PolicyError(f"{where}.{sorted(unknown)[0]}: unknown key")
    effect = raw.get("effect")
    if effect not in EFFECTS:
        raise PolicyError(f'{where}.effect: must be "Allow" or "Deny", not {effect!r}')
    return Statement(
        "Allow" if effect == "Allow" else "Deny",
        _patterns(raw.get("actions"), f"{where}.actions", "action"),
        _patterns(raw.get("resources"), f"{where}.resources", "resource"),
    )


def parse_policy(name: str, raw: object, where: str) -> Policy:
    """A `[policies.<name>]` table: `statements = [{effect, actions, resources}, ...]`."""
    if not isinstance(raw, Mapping):
        raise PolicyError(f"{where}: must be a table with `statements`")
    unknown = set(raw) - {"statements"}
    if unknown:
        raise PolicyError(f"{where}.{sorted(unknown)[0]}: unknown key")
    statements = raw.get("statements")
    if not isinstance(statements, list) or not statements:
        raise PolicyError(f"{where}.statements: required, a non-empty list of statements")
    return Policy(
        name,
        tuple(parse_statement(s, f"{where}.statements[{i}]") for i, s in enumerate(statements)),
    )


def combine(policies: Sequence[Policy]) -> Policy:
    """Several policies attached to one key act as one (RAM evaluates them together)."""
    return Policy(
        "+".join(p.name for p in policies), tuple(s for p in policies for s in p.statements)
    )


# -- resources ------------------------------------------------------------------------------


def resource(
    account: str, project: str, logstore: str | None = None, group: str | None = None
) -> str:
    """`acs:log:local:<account>:project/<p>[/logstore/<l>[/consumergroup/<g>]]`."""
    out = f"acs:log:{REGION}:{account}:project/{project}"
    if logstore is not None:
        out += f"/logstore/{logstore}"
        if group is not None:
            out += f"/consumergroup/{group}"
    return out
