"""Expressions compiled to callables: `compile_expr(node)` gives a function over one log and
the static type of its result. Three-valued logic as in SQL (null propagates, `and`/`or`
short-circuit on a decisive operand); run-time failures raise SplEvalError."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeAlias

from loghubd.server.spl import check
from loghubd.server.spl.ast import (
    Between,
    Binary,
    Call,
    Cast,
    Expr,
    FieldRef,
    InList,
    IsNull,
    Like,
    Lit,
    Unary,
)
from loghubd.server.spl.errors import SplEvalError
from loghubd.server.spl.functions import FUNCTIONS
from loghubd.server.spl.parser import COMPARISONS
from loghubd.server.spl.patterns import like
from loghubd.server.spl.values import (
    BIGINT,
    BOOLEAN,
    TIME_FIELDS,
    VARCHAR,
    Record,
    Value,
    arith,
    cast,
    check_bigint,
    compare,
    kind,
    number,
    parse_int,
    short,
    to_text,
)

Fn: TypeAlias = Callable[[Record], Value]


def _field(name: str) -> tuple[Fn, str]:
    if name in TIME_FIELDS:  # time fields are BIGINT in SPL

        def time_field(r: Record) -> Value:
            v = r.get(name)
            if v is None:
                return None
            n = parse_int(v)
            if n is None:
                raise SplEvalError(f"{name} {short(v)} is not an integer")
            return n

        return time_field, BIGINT

    def field(r: Record) -> Value:
        return r.get(name)

    return field, VARCHAR


def _junction(fa: Fn, fb: Fn, decisive: bool) -> Fn:
    """`and` (decisive False) / `or` (decisive True): the decisive value wins over null and
    skips the right side; otherwise null if either side is null."""

    def fn(r: Record) -> Value:
        a = fa(r)
        if a is decisive:
            return decisive
        b = fb(r)
        if b is decisive:
            return decisive
        return None if a is None or b is None else not decisive

    return fn


def _null_left(fa: Fn, fb: Fn, combine: Callable[[Value, Value], Value]) -> Fn:
    """`combine(a, b)`, or null when `a` is null (and then `b` is not evaluated)."""

    def fn(r: Record) -> Value:
        a = fa(r)
        if a is None:
            return None
        return combine(a, fb(r))

    return fn


def _concat(a: Value, b: Value) -> Value:
    return None if b is None else to_text(a) + to_text(b)


def _unary(node: Unary) -> tuple[Fn, str]:
    f, t = compile_expr(node.operand)
    if node.op == "not":
        check.require_bool(t, node.operand, "not")

        def not_(r: Record) -> Value:
            v = f(r)
            return None if v is None else not v

        return not_, BOOLEAN
    result = check.sign_type(t, node.pos, node.op)
    if node.op == "+":

        def plus(r: Record) -> Value:
            return number(f(r))

        return plus, result

    def neg(r: Record) -> Value:
        v = number(f(r))
        if v is None:
            return None
        return check_bigint(-v) if isinstance(v, int) else -v

    return neg, result


def _binary(node: Binary) -> tuple[Fn, str]:
    fa, ta = compile_expr(node.left)
    fb, tb = compile_expr(node.right)
    op = node.op
    if op in ("and", "or"):
        check.require_bool(ta, node.left, f"'{op}'")
        check.require_bool(tb, node.right, f"'{op}'")
        return _junction(fa, fb, op == "or"), BOOLEAN
    if op in COMPARISONS:
        check.comparable(ta, tb, node.op_pos)
        return _null_left(fa, fb, functools.partial(compare, op)), BOOLEAN
    if op == "||":
        return _null_left(fa, fb, _concat), VARCHAR
    result = check.numeric_type(ta, tb, node.op_pos, op)
    return _null_left(fa, fb, functools.partial(arith, op)), result


def _like(node: Like) -> tuple[Fn, str]:
    fa, _ta = compile_expr(node.operand)
    fp, _tp = compile_expr(node.pattern)
    negated = node.negated

    def matches(a: Value, p: Value) -> Value:
        return None if p is None else like(to_text(a), to_text(p)) != negated

    return _null_left(fa, fp, matches), BOOLEAN


def _in_list(node: InList) -> tuple[Fn, str]:
    fa, ta = compile_expr(node.operand)
    items = []
    for item in node.items:
        fi, ti = compile_expr(item)
        check.comparable(ta, ti, item.pos)
        items.append(fi)
    negated = node.negated

    def in_(r: Record) -> Value:
        a = fa(r)
        if a is None:
            return None
        saw_null = False
        for fi in items:
            b = fi(r)
            if b is None:
                saw_null = True
            elif compare("=", a, b):
                return not negated
        return None if saw_null else negated

    return in_, BOOLEAN


def _between(node: Between) -> tuple[Fn, str]:
    fa, ta = compile_expr(node.operand)
    fl, tl = compile_expr(node.low)
    fh, th = compile_expr(node.high)
    check.comparable(ta, tl, node.low.pos)
    check.comparable(ta, th, node.high.pos)
    negated = node.negated

    def between(r: Record) -> Value:
        a = fa(r)
        if a is None:
            return None
        lo = compare(">=", a, fl(r))
        if lo is False:
            return negated
        hi = compare("<=", a, fh(r))
        if hi is False:
            return negated
        if lo is None or hi is None:
            return None
        return not negated

    return between, BOOLEAN


def _cast(node: Cast) -> tuple[Fn, str]:
    fa, _ta = compile_expr(node.operand)
    ty, safe = node.type, node.safe

    def cast_(r: Record) -> Value:
        v = fa(r)
        if not safe:
            return cast(v, ty)
        try:
            return cast(v, ty)
        except SplEvalError:
            return None

    return cast_, check.cast_type(ty)


def _call(node: Call) -> tuple[Fn, str]:
    check.arity(node)
    compiled = [compile_expr(a) for a in node.args]
    fns = [f for f, _t in compiled]
    result = check.call_type(node, [t for _f, t in compiled])
    spec = FUNCTIONS[node.name]
    impl, nulls = spec.impl, spec.nulls
    if node.name == "coalesce":

        def coalesce(r: Record) -> Value:
            for f in fns:
                v = f(r)
                if v is not None:
                    return v
            return None

        return coalesce, result

    def call(r: Record) -> Value:
        args = [f(r) for f in fns]
        if nulls and any(a is None for a in args):
            return None
        return impl(*args)

    return call, result


def compile_expr(node: Expr) -> tuple[Fn, str]:
    """A function computing `node` over one log, and its static type (raises SplError)."""
    if isinstance(node, Lit):
        value = node.value

        def literal(r: Record) -> Value:
            return value

        return literal, kind(value)
    if isinstance(node, FieldRef):
        return _field(node.name)
    if isinstance(node, Unary):
        return _unary(node)
    if isinstance(node, Binary):
        return _binary(node)
    if isinstance(node, Like):
        return _like(node)
    if isinstance(node, InList):
        return _in_list(node)
    if isinstance(node, Between):
        return _between(node)
    if isinstance(node, IsNull):
        fa, _ta = compile_expr(node.operand)
        negated = node.negated

        def is_null(r: Record) -> Value:
            return (fa(r) is None) != negated

        return is_null, BOOLEAN
    if isinstance(node, Cast):
        return _cast(node)
    assert isinstance(node, Call)
    return _call(node)
