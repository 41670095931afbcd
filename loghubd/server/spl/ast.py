"""The syntax tree of a statement: expression nodes, instruction nodes, and `children`.

Every node is frozen and carries `pos`, the 0-based offset of its first character, so that
later checks can refuse a statement at the right place."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from loghubd.server.spl.values import Value

# -- expressions ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Lit:
    pos: int
    value: Value


@dataclass(frozen=True, slots=True)
class FieldRef:
    pos: int
    name: str


@dataclass(frozen=True, slots=True)
class Unary:
    pos: int
    op: str  # "-" | "+" | "not"
    operand: Expr


@dataclass(frozen=True, slots=True)
class Binary:
    pos: int  # where the expression starts (every node: its first character)
    op: str  # + - * / % || and or = <> < <= > >=
    left: Expr
    right: Expr
    op_pos: int  # where the operator is


@dataclass(frozen=True, slots=True)
class Like:
    pos: int
    operand: Expr
    pattern: Expr
    negated: bool


@dataclass(frozen=True, slots=True)
class InList:
    pos: int
    operand: Expr
    items: tuple[Expr, ...]
    negated: bool


@dataclass(frozen=True, slots=True)
class Between:
    pos: int
    operand: Expr
    low: Expr
    high: Expr
    negated: bool


@dataclass(frozen=True, slots=True)
class IsNull:
    pos: int
    operand: Expr
    negated: bool


@dataclass(frozen=True, slots=True)
class Call:
    pos: int
    name: str  # lower case
    args: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class Cast:
    pos: int
    operand: Expr
    type: str  # lower case, one of values.CAST_TYPES
    safe: bool  # try_cast


Expr: TypeAlias = "Lit | FieldRef | Unary | Binary | Like | InList | Between | IsNull | Call | Cast"


def children(node: Expr) -> tuple[Expr, ...]:
    """The direct sub-expressions of a node, in source order."""
    if isinstance(node, Unary | IsNull | Cast):
        return (node.operand,)
    if isinstance(node, Binary):
        return (node.left, node.right)
    if isinstance(node, Like):
        return (node.operand, node.pattern)
    if isinstance(node, InList):
        return (node.operand, *node.items)
    if isinstance(node, Between):
        return (node.operand, node.low, node.high)
    if isinstance(node, Call):
        return node.args
    return ()


# -- instructions -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Name:
    """A field name as written in an instruction (where it was, for refusals)."""

    pos: int
    name: str


@dataclass(frozen=True, slots=True)
class Where:
    pos: int
    condition: Expr


@dataclass(frozen=True, slots=True)
class Extend:
    pos: int
    assignments: tuple[tuple[Name, Expr], ...]


@dataclass(frozen=True, slots=True)
class Project:
    pos: int
    keep: tuple[Name, ...]
    renames: tuple[tuple[Name, Name], ...]  # (new, old)
    wildcard: bool


@dataclass(frozen=True, slots=True)
class ProjectAway:
    pos: int
    drop: tuple[Name, ...]
    wildcard: bool


@dataclass(frozen=True, slots=True)
class ProjectRename:
    pos: int
    renames: tuple[tuple[Name, Name], ...]


Instruction: TypeAlias = "Where | Extend | Project | ProjectAway | ProjectRename"
