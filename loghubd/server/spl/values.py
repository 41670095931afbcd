"""SPL values at run time: what a log and a value are, their type names, and the operations on
them (number coercion, text form, comparison, arithmetic, cast), which raise SplEvalError."""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from typing import Any, TypeAlias

from loghubd.server.spl.errors import SplEvalError

Record: TypeAlias = dict[str, str]
Value: TypeAlias = "str | int | float | bool | None"

TIME_FIELDS = ("__time__", "__time_ns_part__")  # bigint in SPL, decimal text in a log

BIGINT_MIN, BIGINT_MAX = -(2**63), 2**63 - 1

# Type names. NUMBER (static only): numeric, bigint or double decided at run time (a string
# coerced).
VARCHAR, BIGINT, DOUBLE, BOOLEAN, UNKNOWN, NUMBER = (
    "varchar",
    "bigint",
    "double",
    "boolean",
    "unknown",
    "number",
)
NUMERIC = (BIGINT, DOUBLE, NUMBER)
INT_TYPES = {"bigint": 64, "integer": 32, "int": 32, "smallint": 16, "tinyint": 8}
CAST_TYPES = (*INT_TYPES, "double", "real", "varchar", "boolean")

_INT_TEXT = re.compile(r"[+-]?[0-9]+")
_DOUBLE_TEXT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_SPECIAL_DOUBLES = {"nan": math.nan, "infinity": math.inf, "+infinity": math.inf}
_SPECIAL_DOUBLES["-infinity"] = -math.inf


def kind(v: Value) -> str:
    """The type name of a value."""
    if v is None:
        return UNKNOWN
    if isinstance(v, bool):
        return BOOLEAN
    if isinstance(v, int):
        return BIGINT
    if isinstance(v, float):
        return DOUBLE
    return VARCHAR


def short(s: str) -> str:
    """A string as an error message quotes it (at most 40 characters)."""
    return repr(s if len(s) <= 40 else s[:40] + "...")


def parse_int(s: str) -> int | None:
    """The bigint a string spells, or None."""
    t = s.strip()
    if _INT_TEXT.fullmatch(t) and len(t.lstrip("+-").lstrip("0")) <= 19:
        value = int(t)
        if BIGINT_MIN <= value <= BIGINT_MAX:
            return value
    return None


def parse_double(s: str) -> float | None:
    """The double a string spells (also NaN and [+-]Infinity), or None."""
    t = s.strip()
    if _DOUBLE_TEXT.fullmatch(t):
        return float(t)
    return _SPECIAL_DOUBLES.get(t.lower())


def number(v: Value) -> int | float | None:
    """A numeric operand: numbers as they are, strings parsed (bigint if integral)."""
    if v is None:
        return None
    if isinstance(v, bool):
        raise SplEvalError("a boolean is not a number")
    if isinstance(v, int | float):
        return v
    n: int | float | None = parse_int(v)
    if n is None:
        n = parse_double(v)
    if n is None:
        raise SplEvalError(f"{short(v)} is not a number")
    return n


def check_bigint(v: int) -> int:
    if not BIGINT_MIN <= v <= BIGINT_MAX:
        raise SplEvalError("bigint overflow")
    return v


def fmt_double(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return repr(v)


def to_text(v: Value) -> str:
    """How a value is written into a log (and into `||`, `concat`, string functions)."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return fmt_double(v)
    return v


def _pair(a: Value, b: Value) -> tuple[object, object]:
    """Comparable forms of two non-null values: strings compare as strings, booleans with
    booleans, and a string meeting a number is parsed as a number."""
    if a.__class__ is str and b.__class__ is str:
        return a, b
    if isinstance(a, bool) or isinstance(b, bool):
        if isinstance(a, bool) and isinstance(b, bool):
            return a, b
        raise SplEvalError(f"cannot compare {kind(a)} with {kind(b)}")
    return number(a), number(b)


_CMP: dict[str, Callable[[Any, Any], Any]] = {
    "=": operator.eq,
    "<>": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def compare(op: str, a: Value, b: Value) -> bool | None:
    """`a op b` for a comparison operator; None if either side is null."""
    if a is None or b is None:
        return None
    x, y = _pair(a, b)
    return bool(_CMP[op](x, y))


def arith(op: str, a: Value, b: Value) -> int | float | None:
    """`a op b` for + - * / %: bigint (checked, truncating) if both are integral, else
    double (IEEE, no error on division by zero); None if either side is null."""
    x, y = number(a), number(b)
    if x is None or y is None:
        return None
    if isinstance(x, int) and isinstance(y, int):
        if op == "+":
            return check_bigint(x + y)
        if op == "-":
            return check_bigint(x - y)
        if op == "*":
            return check_bigint(x * y)
        if y == 0:
            raise SplEvalError("division by zero")
        q, r = abs(x) // abs(y), abs(x) % abs(y)
        sign = -1 if (x < 0) != (y < 0) else 1
        if op == "/":
            return check_bigint(sign * q)
        return -r if x < 0 else r
    fx, fy = float(x), float(y)
    if op == "+":
        return fx + fy
    if op == "-":
        return fx - fy
    if op == "*":
        return fx * fy
    if fy == 0.0:
        if op == "%" or fx == 0.0 or math.isnan(fx):
            return math.nan
        return math.copysign(math.inf, fx) * math.copysign(1.0, fy)
    if op == "/":
        return fx / fy
    if math.isinf(fx) or math.isnan(fy):
        return math.nan
    return math.fmod(fx, fy)


def cast(v: Value, ty: str) -> Value:
    """`cast(v as ty)`, `ty` one of CAST_TYPES; null stays null."""
    if v is None:
        return None
    if ty in INT_TYPES:
        bits = INT_TYPES[ty]
        if isinstance(v, bool):
            out: int | None = int(v)
        elif isinstance(v, int):
            out = v
        elif isinstance(v, float):
            if math.isnan(v) or math.isinf(v):
                raise SplEvalError(f"cannot cast {fmt_double(v)} to {ty}")
            out = math.floor(abs(v) + 0.5) * (1 if v >= 0 else -1)
        else:
            out = parse_int(v)
            if out is None:
                raise SplEvalError(f"cannot cast {short(v)} to {ty}")
        if not -(2 ** (bits - 1)) <= out < 2 ** (bits - 1):
            raise SplEvalError(f"{out} is out of the {ty} range")
        return out
    if ty in ("double", "real"):
        if isinstance(v, bool | int | float):
            return float(v)
        d = parse_double(v)
        if d is None:
            raise SplEvalError(f"cannot cast {short(v)} to {ty}")
        return d
    if ty == "boolean":
        if isinstance(v, bool):
            return v
        if isinstance(v, int | float):
            return v != 0
        word = v.strip().lower()
        if word in ("true", "t", "1"):
            return True
        if word in ("false", "f", "0"):
            return False
        raise SplEvalError(f"cannot cast {short(v)} to boolean")
    return to_text(v)  # varchar
