"""The built-in function table: each function's arity, result type and implementation."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from loghubd.server.spl.errors import SplEvalError
from loghubd.server.spl.values import (
    BIGINT,
    BOOLEAN,
    NUMBER,
    VARCHAR,
    Value,
    check_bigint,
    number,
    to_text,
)

MAX_TEXT = 16 * 1024 * 1024  # longest string a function may build


def _integral(v: Value, what: str) -> int:
    n = number(v)
    if isinstance(n, float):
        if not n.is_integer():
            raise SplEvalError(f"{what} must be an integer")
        return int(n)
    assert n is not None
    return n


def _substr(s: Value, start: Value, *rest: Value) -> Value:
    text = to_text(s)
    begin = _integral(start, "substr start")
    n = len(text)
    if begin == 0 or abs(begin) > n:
        return ""
    if begin < 0:
        begin = n + begin + 1
    if rest:  # substr(s, start, length)
        count = _integral(rest[0], "substr length")
        if count < 0:
            raise SplEvalError("substr length must not be negative")
        return text[begin - 1 : begin - 1 + count]
    return text[begin - 1 :]


def _replace(s: Value, search: Value, *rest: Value) -> Value:
    text, old, new = to_text(s), to_text(search), to_text(rest[0]) if rest else ""
    times = text.count(old) if old else len(text) + 1
    if len(text) + times * (len(new) - len(old)) > MAX_TEXT:
        raise SplEvalError(f"replace() would build a string over {MAX_TEXT} characters")
    return text.replace(old, new)


def _abs(v: Value) -> Value:
    n = number(v)
    assert n is not None
    return check_bigint(abs(n)) if isinstance(n, int) else abs(n)


@dataclass(frozen=True, slots=True)
class Function:
    min_args: int
    max_args: int  # -1: any number
    result: str  # static type; "" = the common type of the arguments (coalesce)
    impl: Callable[..., Value]
    nulls: bool = True  # a null argument makes the result null


FUNCTIONS: dict[str, Function] = {
    "lower": Function(1, 1, VARCHAR, lambda s: to_text(s).lower()),
    "upper": Function(1, 1, VARCHAR, lambda s: to_text(s).upper()),
    "length": Function(1, 1, BIGINT, lambda s: len(to_text(s))),
    "trim": Function(1, 1, VARCHAR, lambda s: to_text(s).strip()),
    "concat": Function(2, -1, VARCHAR, lambda *a: "".join(to_text(v) for v in a)),
    "substr": Function(2, 3, VARCHAR, _substr),
    "replace": Function(2, 3, VARCHAR, _replace),
    "strpos": Function(2, 2, BIGINT, lambda s, sub: to_text(s).find(to_text(sub)) + 1),
    "starts_with": Function(2, 2, BOOLEAN, lambda s, p: to_text(s).startswith(to_text(p))),
    "abs": Function(1, 1, NUMBER, _abs),
    "coalesce": Function(
        1, -1, "", lambda *a: next((v for v in a if v is not None), None), nulls=False
    ),
}
