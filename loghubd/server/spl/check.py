"""Static checks of a parsed statement: the rules on the static type of each expression, and
the refusals (SplError at the offending position) of ill-typed expressions, wrong argument
counts, trees too deep to evaluate, and conflicting renames. Evaluation lives in evaluate.py,
which asks these rules as it compiles."""

from __future__ import annotations

from collections.abc import Sequence

from loghubd.server.spl.ast import Call, Expr, Name, children
from loghubd.server.spl.errors import SplError
from loghubd.server.spl.functions import FUNCTIONS
from loghubd.server.spl.values import (
    BIGINT,
    BOOLEAN,
    DOUBLE,
    INT_TYPES,
    NUMBER,
    NUMERIC,
    TIME_FIELDS,
    UNKNOWN,
    VARCHAR,
)

MAX_TREE_DEPTH = 128  # depth of an expression tree (long operator chains)


def require_bool(t: str, node: Expr, context: str) -> None:
    """`node` (of static type `t`) is used as a condition."""
    if t not in (BOOLEAN, UNKNOWN):
        raise SplError(node.pos, f"{context} needs a condition (a boolean expression), not {t}")


def comparable(ta: str, tb: str, pos: int) -> None:
    """Booleans compare only with booleans (or null); strings and numbers meet at run time."""
    if BOOLEAN in (ta, tb) and not {ta, tb} <= {BOOLEAN, UNKNOWN}:
        raise SplError(pos, f"cannot compare {ta} with {tb}")


def numeric_type(ta: str, tb: str, pos: int, op: str) -> str:
    """The static type of `a op b` for an arithmetic operator."""
    if BOOLEAN in (ta, tb):
        raise SplError(pos, f"'{op}' needs numbers, not boolean")
    known = {t for t in (ta, tb) if t != UNKNOWN}
    if known == {BIGINT} or not known:
        return BIGINT
    if DOUBLE in known:
        return DOUBLE
    return NUMBER


def sign_type(t: str, pos: int, op: str) -> str:
    """The static type of unary `-x` / `+x`."""
    if t == BOOLEAN:
        raise SplError(pos, f"'{op}' needs a number, not boolean")
    return t if t != VARCHAR else NUMBER


def cast_type(ty: str) -> str:
    """The static type of `cast(... as ty)`."""
    if ty in INT_TYPES:
        return BIGINT
    if ty in ("double", "real"):
        return DOUBLE
    return BOOLEAN if ty == "boolean" else VARCHAR


def arity(node: Call) -> None:
    """A function call has as many arguments as the function takes (checked before them)."""
    spec = FUNCTIONS[node.name]
    n = len(node.args)
    if n < spec.min_args or (spec.max_args >= 0 and n > spec.max_args):
        if spec.max_args < 0:
            wanted = f"at least {spec.min_args}"
        elif spec.min_args == spec.max_args:
            wanted = str(spec.min_args)
        else:
            wanted = f"{spec.min_args} to {spec.max_args}"
        raise SplError(node.pos, f"{node.name}() takes {wanted} argument(s), not {n}")


def call_type(node: Call, arg_types: Sequence[str]) -> str:
    """The static type of a function call, given its arguments' (checked by `arity`)."""
    spec = FUNCTIONS[node.name]
    if not spec.result:  # coalesce: one type for all arguments
        kinds = {t for t in arg_types if t != UNKNOWN}
        if BOOLEAN in kinds and len(kinds) > 1:
            raise SplError(node.pos, f"{node.name}() cannot mix boolean with other types")
        if len(kinds) <= 1:
            return kinds.pop() if kinds else UNKNOWN
        # strings meet numbers dynamically, as in comparisons
        return NUMBER if kinds <= set(NUMERIC) else VARCHAR
    if node.name == "abs":
        if arg_types[0] == BOOLEAN:
            raise SplError(node.pos, "abs() needs a number, not boolean")
        return arg_types[0] if arg_types[0] in (BIGINT, DOUBLE) else NUMBER
    return spec.result


def depth(root: Expr) -> None:
    """Refuse trees too deep to compile and evaluate recursively (e.g. `a+a+a+...`)."""
    stack = [(root, 1)]
    while stack:
        node, level = stack.pop()
        if level > MAX_TREE_DEPTH:
            raise SplError(node.pos, f"expression deeper than {MAX_TREE_DEPTH} operations")
        stack.extend((child, level + 1) for child in reversed(children(node)))


def time_assignment(name: Name, expr: Expr, t: str) -> None:
    """`extend __time__ = expr`: only an integer expression can become a time field."""
    if name.name in TIME_FIELDS and t != BIGINT:
        raise SplError(
            expr.pos, f"{name.name} must be assigned an integer (bigint) expression, not {t}"
        )


def renames(pairs: Sequence[tuple[Name, Name]]) -> None:
    """(new, old) pairs: no time field, no two targets alike, no source renamed twice."""
    targets: set[str] = set()
    sources: set[str] = set()
    for new, old in pairs:
        for n in (new, old):
            if n.name in TIME_FIELDS:
                raise SplError(n.pos, "time fields cannot be renamed or overwritten")
        if new.name in targets:
            raise SplError(new.pos, f"two fields are renamed to {new.name!r}")
        if old.name in sources:
            raise SplError(old.pos, f"field {old.name!r} is renamed twice")
        targets.add(new.name)
        sources.add(old.name)
