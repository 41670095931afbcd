"""SPL (the SLS Processing Language) on PullLogs: the subset `loghubd serve` implements.

Pure: no I/O, no clock. `compile(text)` parses a statement (tokenizer + recursive descent
into a small AST), type-checks it and turns it into a `Program`: a function over one flattened
log (`{"__time__": "...", "__topic__": "...", "level": "ERROR", ...}`, every value a string)
that returns the transformed log, or None when a `where` dropped it. Compiled programs are
cached (bounded LRU), so a consumer sending the same statement with every pull pays for the
parse once.

The grammar, the functions and the semantics are documented in README.md ("SPL on pull").
In short::

    statement   := '*' ( '|' instruction )*
    instruction := 'where' expr
                 | 'extend' field '=' expr ( ',' field '=' expr )*
                 | 'project' [ '-wildcard' ] item ( ',' item )*   (item := field | field '=' field)
                 | 'project-away' [ '-wildcard' ] field ( ',' field )*
                 | 'project-rename' field '=' field ( ',' field '=' field )*
    expr        := or;  or := and ('or' and)*;  and := not ('and' not)*;  not := 'not' not | pred
    pred        := concat [ cmp concat | 'is' ['not'] 'null' | ['not'] 'like' concat
                           | ['not'] 'in' '(' expr (',' expr)* ')'
                           | ['not'] 'between' concat 'and' concat ]
    concat      := sum ('||' sum)*;  sum := term (('+'|'-') term)*
    term        := unary (('*'|'/'|'%') unary)*
    unary       := ('-'|'+') unary | primary
    primary     := 'string' | number | 'true' | 'false' | 'null' | field | '(' expr ')'
                 | ('cast'|'try_cast') '(' expr 'as' type ')' | function '(' [expr (',' expr)*] ')'

Errors in the statement raise `SplError(position, reason)` (position = 0-based character
offset). Errors while evaluating one log (a failed `cast`, a non-numeric string compared with
a number, a division by zero) raise `SplEvalError` from `Program.run`; the caller drops that
log and counts it as failed. `Program.__call__` never raises: a failed log is None.
"""

from __future__ import annotations

import functools
import math
import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, TypeAlias

Record: TypeAlias = dict[str, str]
Value: TypeAlias = "str | int | float | bool | None"
Fn: TypeAlias = Callable[[Record], Value]
Stage: TypeAlias = Callable[[Record], "Record | None"]

MAX_STATEMENT_CHARS = 16 * 1024
MAX_DEPTH = 32  # nesting of parentheses / not / unary minus while parsing
MAX_TREE_DEPTH = 128  # depth of an expression tree (long operator chains)
MAX_TEXT = 16 * 1024 * 1024  # longest string a function may build
CACHE_SIZE = 256
TIME_FIELDS = ("__time__", "__time_ns_part__")
INSTRUCTIONS = ("where", "extend", "project", "project-away", "project-rename")
BIGINT_MIN, BIGINT_MAX = -(2**63), 2**63 - 1

# Static types. NUMBER: numeric, bigint or double decided at run time (a string coerced).
VARCHAR, BIGINT, DOUBLE, BOOLEAN, UNKNOWN, NUMBER = (
    "varchar",
    "bigint",
    "double",
    "boolean",
    "unknown",
    "number",
)
_NUMERIC = (BIGINT, DOUBLE, NUMBER)
_INT_TYPES = {"bigint": 64, "integer": 32, "int": 32, "smallint": 16, "tinyint": 8}
_CAST_TYPES = (*_INT_TYPES, "double", "real", "varchar", "boolean")
_KEYWORDS = frozenset(
    ("and", "or", "not", "like", "in", "is", "null", "true", "false", "between")
) | {"cast", "try_cast", "as"}


class SplError(ValueError):
    """The statement is outside the supported subset (or not SPL at all)."""

    def __init__(self, position: int, reason: str) -> None:
        super().__init__(f"position {position}: {reason}")
        self.position = position
        self.reason = reason


class SplEvalError(Exception):
    """Evaluating the statement on one log failed; that log is dropped and counted."""


# -- tokens -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # ident | qident | string | int | float | op | end
    text: str  # identifier, decoded string/quoted name, number text or operator
    pos: int
    end: int


_OPS = ("||", "<>", "!=", "<=", ">=", "|", "(", ")", ",", "=", "<", ">", "+", "-", "*", "/", "%")
_NUMBER_RE = re.compile(r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DIGITS = "0123456789"


def _quoted(text: str, start: int, quote: str, what: str) -> tuple[str, int]:
    """The body of a quoted token starting at `start` (doubled quotes escape); end offset."""
    out: list[str] = []
    i = start + 1
    while True:
        j = text.find(quote, i)
        if j < 0:
            raise SplError(start, f"unterminated {what}")
        out.append(text[i:j])
        if text.startswith(quote * 2, j):
            out.append(quote)
            i = j + 2
            continue
        return "".join(out), j + 1


def tokenize(text: str) -> list[Token]:
    out: list[Token] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
            continue
        if c == "'":
            body, end = _quoted(text, i, "'", "string literal (strings are single-quoted)")
            out.append(Token("string", body, i, end))
            i = end
            continue
        if c == '"':
            body, end = _quoted(text, i, '"', 'quoted field name ("...")')
            if not body:
                raise SplError(i, "empty field name")
            out.append(Token("qident", body, i, end))
            i = end
            continue
        if c in _DIGITS or (c == "." and i + 1 < n and text[i + 1] in _DIGITS):
            m = _NUMBER_RE.match(text, i)
            assert m is not None
            end = m.end()
            if end < n and (text[end].isalnum() or text[end] in "_."):
                raise SplError(i, f"invalid number {text[i : end + 1]!r}")
            kind = "float" if any(ch in ".eE" for ch in m.group()) else "int"
            out.append(Token(kind, m.group(), i, end))
            i = end
            continue
        m = _IDENT_RE.match(text, i)
        if m:
            out.append(Token("ident", m.group(), i, m.end()))
            i = m.end()
            continue
        if text.startswith("==", i):
            raise SplError(i, "'==' is not SPL: compare with '='")
        op = next((o for o in _OPS if text.startswith(o, i)), None)
        if op is None:
            raise SplError(i, f"unexpected character {c!r}")
        out.append(Token("op", op, i, i + len(op)))
        i += len(op)
    out.append(Token("end", "", n, n))
    return out


def _describe(tok: Token) -> str:
    if tok.kind == "end":
        return "the end of the statement"
    if tok.kind == "string":
        return f"string '{tok.text[:40]}'"
    if tok.kind == "qident":
        return f'"{tok.text[:40]}"'
    return f"'{tok.text[:40]}'"


# -- AST --------------------------------------------------------------------------------------


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
    op: str  # "-" | "not"
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
    type: str  # lower case, one of _CAST_TYPES
    safe: bool  # try_cast


Expr: TypeAlias = "Lit | FieldRef | Unary | Binary | Like | InList | Between | IsNull | Call | Cast"


@dataclass(frozen=True, slots=True)
class Name:
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

_COMPARISONS = ("=", "<>", "!=", "<", "<=", ">", ">=")


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = tokenize(text)
        self.i = 0
        self.depth = 0

    # -- helpers

    def peek(self, k: int = 0) -> Token:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def next(self) -> Token:
        tok = self.peek()
        self.i = min(self.i + 1, len(self.toks) - 1)
        return tok

    def at_op(self, *ops: str) -> bool:
        t = self.peek()
        return t.kind == "op" and t.text in ops

    def at_kw(self, *kws: str, k: int = 0) -> bool:
        t = self.peek(k)
        return t.kind == "ident" and t.text.lower() in kws

    @staticmethod
    def fail(tok: Token, reason: str) -> NoReturn:
        raise SplError(tok.pos, reason)

    def expect_op(self, op: str, context: str) -> Token:
        if not self.at_op(op):
            t = self.peek()
            self.fail(t, f"expected '{op}' {context}, found {_describe(t)}")
        return self.next()

    def expect_kw(self, kw: str, context: str) -> Token:
        if not self.at_kw(kw):
            t = self.peek()
            self.fail(t, f"expected '{kw}' {context}, found {_describe(t)}")
        return self.next()

    def enter(self, tok: Token) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            self.fail(tok, f"expression nests deeper than {MAX_DEPTH} levels")

    def name(self, what: str) -> Name:
        t = self.next()
        if t.kind == "qident":
            return Name(t.pos, t.text)
        if t.kind == "ident":
            if t.text.lower() in _KEYWORDS:
                self.fail(t, f"'{t.text}' is a keyword; write \"{t.text}\" for such a field")
            return Name(t.pos, t.text)
        self.fail(t, f"expected {what}, found {_describe(t)}")

    # -- statement

    def statement(self) -> tuple[Instruction, ...]:
        first = self.next()
        if not (first.kind == "op" and first.text == "*"):
            self.fail(
                first,
                "a statement starts with '*' (search conditions before the first '|' are "
                "not supported when consuming)",
            )
        out: list[Instruction] = []
        while self.at_op("|"):
            self.next()
            out.append(self.instruction())
        t = self.peek()
        if t.kind != "end":
            self.fail(t, f"expected '|' or the end of the statement, found {_describe(t)}")
        return tuple(out)

    def instruction(self) -> Instruction:
        t = self.next()
        if t.kind != "ident":
            self.fail(t, f"expected an instruction after '|', found {_describe(t)}")
        name, end = t.text, t.end
        while (
            self.at_op("-")
            and self.peek().pos == end
            and self.peek(1).kind == "ident"
            and self.peek(1).pos == end + 1
        ):
            self.next()
            word = self.next()
            name, end = f"{name}-{word.text}", word.end
        kind = name.lower()
        if kind == "where":
            return Where(t.pos, self.expr())
        if kind == "extend":
            return Extend(t.pos, tuple(self.assignments("extend")))
        if kind == "project":
            wildcard = self.wildcard_flag()
            keep: list[Name] = []
            renames: list[tuple[Name, Name]] = []
            while True:
                field = self.name("a field name")
                if self.at_op("="):
                    self.next()
                    renames.append((field, self.name("the field to rename")))
                else:
                    keep.append(field)
                if not self.at_op(","):
                    break
                self.next()
            return Project(t.pos, tuple(keep), tuple(renames), wildcard)
        if kind == "project-away":
            wildcard = self.wildcard_flag()
            drop = [self.name("a field name")]
            while self.at_op(","):
                self.next()
                drop.append(self.name("a field name"))
            return ProjectAway(t.pos, tuple(drop), wildcard)
        if kind == "project-rename":
            pairs = []
            while True:
                new = self.name("a field name")
                self.expect_op("=", "after the new field name (project-rename new = old)")
                pairs.append((new, self.name("the field to rename")))
                if not self.at_op(","):
                    break
                self.next()
            return ProjectRename(t.pos, tuple(pairs))
        self.fail(
            t,
            f"instruction '{name[:40]}' is not supported by loghubd serve "
            f"(supported: {', '.join(INSTRUCTIONS)})",
        )

    def wildcard_flag(self) -> bool:
        if self.at_op("-") and self.at_kw("wildcard", k=1) and self.peek(1).pos == self.peek().end:
            self.next()
            self.next()
            return True
        return False

    def assignments(self, instruction: str) -> list[tuple[Name, Expr]]:
        out: list[tuple[Name, Expr]] = []
        while True:
            field = self.name("a field name")
            self.expect_op("=", f"after the field name ({instruction} field = expression)")
            out.append((field, self.expr()))
            if not self.at_op(","):
                return out
            self.next()

    # -- expressions

    def expr(self) -> Expr:
        self.enter(self.peek())
        try:
            return self.or_expr()
        finally:
            self.depth -= 1

    def or_expr(self) -> Expr:
        left = self.and_expr()
        while self.at_kw("or"):
            op = self.next()
            left = Binary(left.pos, "or", left, self.and_expr(), op.pos)
        return left

    def and_expr(self) -> Expr:
        left = self.not_expr()
        while self.at_kw("and"):
            op = self.next()
            left = Binary(left.pos, "and", left, self.not_expr(), op.pos)
        return left

    def not_expr(self) -> Expr:
        if self.at_kw("not"):
            op = self.next()
            self.enter(op)
            try:
                return Unary(op.pos, "not", self.not_expr())
            finally:
                self.depth -= 1
        return self.predicate()

    def predicate(self) -> Expr:
        left = self.concat()
        if self.at_op(*_COMPARISONS):
            op = self.next()
            return Binary(
                left.pos, "<>" if op.text == "!=" else op.text, left, self.concat(), op.pos
            )
        if self.at_kw("is"):
            self.next()
            negated = self.at_kw("not")
            if negated:
                self.next()
            self.expect_kw("null", "after 'is' (is [not] null)")
            return IsNull(left.pos, left, negated)
        negated = False
        if self.at_kw("not") and self.at_kw("like", "in", "between", k=1):
            self.next()
            negated = True
        if self.at_kw("like"):
            self.next()
            return Like(left.pos, left, self.concat(), negated)
        if self.at_kw("in"):
            self.next()
            self.expect_op("(", "after 'in'")
            items = [self.expr()]
            while self.at_op(","):
                self.next()
                items.append(self.expr())
            self.expect_op(")", "to close the 'in' list")
            return InList(left.pos, left, tuple(items), negated)
        if self.at_kw("between"):
            self.next()
            low = self.concat()
            self.expect_kw("and", "between the bounds of 'between'")
            return Between(left.pos, left, low, self.concat(), negated)
        return left

    def concat(self) -> Expr:
        left = self.sum()
        while self.at_op("||"):
            op = self.next()
            left = Binary(left.pos, "||", left, self.sum(), op.pos)
        return left

    def sum(self) -> Expr:
        left = self.term()
        while self.at_op("+", "-"):
            op = self.next()
            left = Binary(left.pos, op.text, left, self.term(), op.pos)
        return left

    def term(self) -> Expr:
        left = self.unary()
        while self.at_op("*", "/", "%"):
            op = self.next()
            left = Binary(left.pos, op.text, left, self.unary(), op.pos)
        return left

    def unary(self) -> Expr:
        if self.at_op("-", "+"):
            op = self.next()
            self.enter(op)
            try:
                operand = self.unary()
            finally:
                self.depth -= 1
            return Unary(op.pos, "-", operand) if op.text == "-" else Unary(op.pos, "+", operand)
        return self.primary()

    def primary(self) -> Expr:
        t = self.next()
        if t.kind == "string":
            return Lit(t.pos, t.text)
        if t.kind == "int":
            digits = t.text.lstrip("0") or "0"
            if len(digits) > 19 or int(digits) > BIGINT_MAX:
                self.fail(t, f"integer {t.text[:40]} is out of the bigint range")
            return Lit(t.pos, int(digits))
        if t.kind == "float":
            value = float(t.text)
            if math.isinf(value):
                self.fail(t, f"number {t.text[:40]} is out of the double range")
            return Lit(t.pos, value)
        if t.kind == "qident":
            return FieldRef(t.pos, t.text)
        if t.kind == "op" and t.text == "(":
            inner = self.expr()
            self.expect_op(")", "to close '('")
            return inner
        if t.kind == "ident":
            word = t.text.lower()
            if word in ("true", "false"):
                return Lit(t.pos, word == "true")
            if word == "null":
                return Lit(t.pos, None)
            if word in ("cast", "try_cast"):
                self.expect_op("(", f"after '{t.text}'")
                operand = self.expr()
                self.expect_kw("as", f"in {word}(value as type)")
                ty = self.next()
                if ty.kind != "ident" or ty.text.lower() not in _CAST_TYPES:
                    self.fail(
                        ty,
                        f"unsupported type {_describe(ty)} (supported: {', '.join(_CAST_TYPES)})",
                    )
                self.expect_op(")", f"to close {word}(...)")
                return Cast(t.pos, operand, ty.text.lower(), word == "try_cast")
            if self.at_op("("):
                if word not in _FUNCTIONS:
                    self.fail(
                        t,
                        f"unknown function '{t.text[:40]}' (supported: cast, try_cast, "
                        f"{', '.join(sorted(_FUNCTIONS))})",
                    )
                self.next()
                args: list[Expr] = []
                if not self.at_op(")"):
                    args.append(self.expr())
                    while self.at_op(","):
                        self.next()
                        args.append(self.expr())
                self.expect_op(")", f"to close {word}(...)")
                return Call(t.pos, word, tuple(args))
            if word in _KEYWORDS:
                self.fail(t, f"unexpected keyword '{t.text}'")
            return FieldRef(t.pos, t.text)
        self.fail(t, f"expected a value, a field or '(', found {_describe(t)}")


def parse(text: str) -> tuple[Instruction, ...]:
    """The instructions of a statement (raises SplError)."""
    if len(text) > MAX_STATEMENT_CHARS:
        raise SplError(0, f"statement longer than {MAX_STATEMENT_CHARS} characters")
    return _Parser(text).statement()


# -- values -----------------------------------------------------------------------------------

_INT_TEXT = re.compile(r"[+-]?[0-9]+")
_DOUBLE_TEXT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_SPECIAL_DOUBLES = {"nan": math.nan, "infinity": math.inf, "+infinity": math.inf}
_SPECIAL_DOUBLES["-infinity"] = -math.inf


def _kind(v: Value) -> str:
    if v is None:
        return UNKNOWN
    if isinstance(v, bool):
        return BOOLEAN
    if isinstance(v, int):
        return BIGINT
    if isinstance(v, float):
        return DOUBLE
    return VARCHAR


def _short(s: str) -> str:
    return repr(s if len(s) <= 40 else s[:40] + "...")


def _parse_int(s: str) -> int | None:
    t = s.strip()
    if _INT_TEXT.fullmatch(t) and len(t.lstrip("+-").lstrip("0")) <= 19:
        value = int(t)
        if BIGINT_MIN <= value <= BIGINT_MAX:
            return value
    return None


def _parse_double(s: str) -> float | None:
    t = s.strip()
    if _DOUBLE_TEXT.fullmatch(t):
        return float(t)
    return _SPECIAL_DOUBLES.get(t.lower())


def _number(v: Value) -> int | float | None:
    """A numeric operand: numbers as they are, strings parsed (bigint if integral)."""
    if v is None:
        return None
    if isinstance(v, bool):
        raise SplEvalError("a boolean is not a number")
    if isinstance(v, int | float):
        return v
    n: int | float | None = _parse_int(v)
    if n is None:
        n = _parse_double(v)
    if n is None:
        raise SplEvalError(f"{_short(v)} is not a number")
    return n


def _check_bigint(v: int) -> int:
    if not BIGINT_MIN <= v <= BIGINT_MAX:
        raise SplEvalError("bigint overflow")
    return v


def _fmt_double(v: float) -> str:
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
        return _fmt_double(v)
    return v


def _pair(a: Value, b: Value) -> tuple[object, object]:
    """Comparable forms of two non-null values: strings compare as strings, booleans with
    booleans, and a string meeting a number is parsed as a number."""
    if a.__class__ is str and b.__class__ is str:
        return a, b
    if isinstance(a, bool) or isinstance(b, bool):
        if isinstance(a, bool) and isinstance(b, bool):
            return a, b
        raise SplEvalError(f"cannot compare {_kind(a)} with {_kind(b)}")
    return _number(a), _number(b)


_CMP: dict[str, Callable[[Any, Any], Any]] = {
    "=": operator.eq,
    "<>": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def _compare(op: str, a: Value, b: Value) -> bool | None:
    if a is None or b is None:
        return None
    x, y = _pair(a, b)
    return bool(_CMP[op](x, y))


def _arith(op: str, a: Value, b: Value) -> int | float | None:
    x, y = _number(a), _number(b)
    if x is None or y is None:
        return None
    if isinstance(x, int) and isinstance(y, int):
        if op == "+":
            return _check_bigint(x + y)
        if op == "-":
            return _check_bigint(x - y)
        if op == "*":
            return _check_bigint(x * y)
        if y == 0:
            raise SplEvalError("division by zero")
        q, r = abs(x) // abs(y), abs(x) % abs(y)
        sign = -1 if (x < 0) != (y < 0) else 1
        if op == "/":
            return _check_bigint(sign * q)
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


@functools.lru_cache(maxsize=1024)
def _like_plan(pattern: str) -> tuple[tuple[int, str | re.Pattern[str]], ...]:
    """The `%`-separated segments of a LIKE pattern: (length, literal or `_`-regex)."""
    plan: list[tuple[int, str | re.Pattern[str]]] = []
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


def like(text: str, pattern: str) -> bool:
    """SQL LIKE: `%` any run, `_` any one character, case-sensitive, whole string.

    The segments between `%` have fixed lengths, so the first is matched at the start, the
    last at the end and the middle ones leftmost in order (greedy is exact here): no
    backtracking, C-speed searches."""
    plan = _like_plan(pattern)
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


def _glob(name: str, pattern: str) -> bool:
    """A field pattern of `project -wildcard`: `*` matches any run of characters."""
    parts = pattern.split("*")
    if len(parts) == 1:
        return name == pattern
    first, last = parts[0], parts[-1]
    if len(name) < len(first) + len(last) or not (name.startswith(first) and name.endswith(last)):
        return False
    at, stop = len(first), len(name) - len(last)
    for part in parts[1:-1]:
        found = name.find(part, at, stop)
        if found < 0:
            return False
        at = found + len(part)
    return True


def _cast(v: Value, ty: str) -> Value:
    if v is None:
        return None
    if ty in _INT_TYPES:
        bits = _INT_TYPES[ty]
        if isinstance(v, bool):
            out: int | None = int(v)
        elif isinstance(v, int):
            out = v
        elif isinstance(v, float):
            if math.isnan(v) or math.isinf(v):
                raise SplEvalError(f"cannot cast {_fmt_double(v)} to {ty}")
            out = math.floor(abs(v) + 0.5) * (1 if v >= 0 else -1)
        else:
            out = _parse_int(v)
            if out is None:
                raise SplEvalError(f"cannot cast {_short(v)} to {ty}")
        if not -(2 ** (bits - 1)) <= out < 2 ** (bits - 1):
            raise SplEvalError(f"{out} is out of the {ty} range")
        return out
    if ty in ("double", "real"):
        if isinstance(v, bool | int | float):
            return float(v)
        d = _parse_double(v)
        if d is None:
            raise SplEvalError(f"cannot cast {_short(v)} to {ty}")
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
        raise SplEvalError(f"cannot cast {_short(v)} to boolean")
    return to_text(v)  # varchar


def _cast_type(ty: str) -> str:
    if ty in _INT_TYPES:
        return BIGINT
    if ty in ("double", "real"):
        return DOUBLE
    return BOOLEAN if ty == "boolean" else VARCHAR


# -- functions --------------------------------------------------------------------------------


def _integral(v: Value, what: str) -> int:
    n = _number(v)
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
    n = _number(v)
    assert n is not None
    return _check_bigint(abs(n)) if isinstance(n, int) else abs(n)


@dataclass(frozen=True, slots=True)
class _Function:
    min_args: int
    max_args: int  # -1: any number
    result: str  # static type; "" = the common type of the arguments (coalesce)
    impl: Callable[..., Value]
    nulls: bool = True  # a null argument makes the result null


_FUNCTIONS: dict[str, _Function] = {
    "lower": _Function(1, 1, VARCHAR, lambda s: to_text(s).lower()),
    "upper": _Function(1, 1, VARCHAR, lambda s: to_text(s).upper()),
    "length": _Function(1, 1, BIGINT, lambda s: len(to_text(s))),
    "trim": _Function(1, 1, VARCHAR, lambda s: to_text(s).strip()),
    "concat": _Function(2, -1, VARCHAR, lambda *a: "".join(to_text(v) for v in a)),
    "substr": _Function(2, 3, VARCHAR, _substr),
    "replace": _Function(2, 3, VARCHAR, _replace),
    "strpos": _Function(2, 2, BIGINT, lambda s, sub: to_text(s).find(to_text(sub)) + 1),
    "starts_with": _Function(2, 2, BOOLEAN, lambda s, p: to_text(s).startswith(to_text(p))),
    "abs": _Function(1, 1, NUMBER, _abs),
    "coalesce": _Function(
        1, -1, "", lambda *a: next((v for v in a if v is not None), None), nulls=False
    ),
}


# -- compiling --------------------------------------------------------------------------------


def _field_fn(name: str) -> tuple[Fn, str]:
    if name in TIME_FIELDS:  # time fields are BIGINT in SPL

        def time_field(r: Record) -> Value:
            v = r.get(name)
            if v is None:
                return None
            n = _parse_int(v)
            if n is None:
                raise SplEvalError(f"{name} {_short(v)} is not an integer")
            return n

        return time_field, BIGINT

    def field(r: Record) -> Value:
        return r.get(name)

    return field, VARCHAR


def _require_bool(t: str, node: Expr, context: str) -> None:
    if t not in (BOOLEAN, UNKNOWN):
        raise SplError(node.pos, f"{context} needs a condition (a boolean expression), not {t}")


def _check_comparable(ta: str, tb: str, pos: int) -> None:
    if BOOLEAN in (ta, tb) and not {ta, tb} <= {BOOLEAN, UNKNOWN}:
        raise SplError(pos, f"cannot compare {ta} with {tb}")


def _numeric_type(ta: str, tb: str, pos: int, op: str) -> str:
    if BOOLEAN in (ta, tb):
        raise SplError(pos, f"'{op}' needs numbers, not boolean")
    known = {t for t in (ta, tb) if t != UNKNOWN}
    if known == {BIGINT} or not known:
        return BIGINT
    if DOUBLE in known:
        return DOUBLE
    return NUMBER


def _and(fa: Fn, fb: Fn) -> Fn:
    def fn(r: Record) -> Value:
        a = fa(r)
        if a is False:
            return False
        b = fb(r)
        if b is False:
            return False
        return None if a is None or b is None else True

    return fn


def _or(fa: Fn, fb: Fn) -> Fn:
    def fn(r: Record) -> Value:
        a = fa(r)
        if a is True:
            return True
        b = fb(r)
        if b is True:
            return True
        return None if a is None or b is None else False

    return fn


def _compile_expr(node: Expr) -> tuple[Fn, str]:
    if isinstance(node, Lit):
        value = node.value

        def literal(r: Record) -> Value:
            return value

        return literal, _kind(value)
    if isinstance(node, FieldRef):
        return _field_fn(node.name)
    if isinstance(node, Unary):
        f, t = _compile_expr(node.operand)
        if node.op == "not":
            _require_bool(t, node.operand, "not")

            def not_(r: Record) -> Value:
                v = f(r)
                return None if v is None else not v

            return not_, BOOLEAN
        if t == BOOLEAN:
            raise SplError(node.pos, f"'{node.op}' needs a number, not boolean")
        if node.op == "+":

            def plus(r: Record) -> Value:
                return _number(f(r))

            return plus, t if t != VARCHAR else NUMBER

        def neg(r: Record) -> Value:
            v = _number(f(r))
            if v is None:
                return None
            return _check_bigint(-v) if isinstance(v, int) else -v

        return neg, t if t != VARCHAR else NUMBER
    if isinstance(node, Binary):
        fa, ta = _compile_expr(node.left)
        fb, tb = _compile_expr(node.right)
        op = node.op
        if op in ("and", "or"):
            _require_bool(ta, node.left, f"'{op}'")
            _require_bool(tb, node.right, f"'{op}'")
            return (_and(fa, fb) if op == "and" else _or(fa, fb)), BOOLEAN
        if op in _COMPARISONS:
            _check_comparable(ta, tb, node.op_pos)

            def compare(r: Record) -> Value:
                a = fa(r)
                if a is None:
                    return None
                return _compare(op, a, fb(r))

            return compare, BOOLEAN
        if op == "||":

            def concat(r: Record) -> Value:
                a = fa(r)
                if a is None:
                    return None
                b = fb(r)
                return None if b is None else to_text(a) + to_text(b)

            return concat, VARCHAR
        result = _numeric_type(ta, tb, node.op_pos, op)

        def arith(r: Record) -> Value:
            a = fa(r)
            if a is None:
                return None
            return _arith(op, a, fb(r))

        return arith, result
    if isinstance(node, Like):
        fa, _ta = _compile_expr(node.operand)
        fp, _tp = _compile_expr(node.pattern)
        negated = node.negated

        def like_(r: Record) -> Value:
            a = fa(r)
            if a is None:
                return None
            p = fp(r)
            if p is None:
                return None
            return like(to_text(a), to_text(p)) != negated

        return like_, BOOLEAN
    if isinstance(node, InList):
        fa, ta = _compile_expr(node.operand)
        items = []
        for item in node.items:
            fi, ti = _compile_expr(item)
            _check_comparable(ta, ti, item.pos)
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
                elif _compare("=", a, b):
                    return not negated
            return None if saw_null else negated

        return in_, BOOLEAN
    if isinstance(node, Between):
        fa, ta = _compile_expr(node.operand)
        fl, tl = _compile_expr(node.low)
        fh, th = _compile_expr(node.high)
        _check_comparable(ta, tl, node.low.pos)
        _check_comparable(ta, th, node.high.pos)
        negated = node.negated

        def between(r: Record) -> Value:
            a = fa(r)
            if a is None:
                return None
            lo = _compare(">=", a, fl(r))
            if lo is False:
                return negated
            hi = _compare("<=", a, fh(r))
            if hi is False:
                return negated
            if lo is None or hi is None:
                return None
            return not negated

        return between, BOOLEAN
    if isinstance(node, IsNull):
        fa, _ta = _compile_expr(node.operand)
        negated = node.negated

        def is_null(r: Record) -> Value:
            return (fa(r) is None) != negated

        return is_null, BOOLEAN
    if isinstance(node, Cast):
        fa, ta = _compile_expr(node.operand)
        ty, safe = node.type, node.safe

        def cast(r: Record) -> Value:
            v = fa(r)
            if not safe:
                return _cast(v, ty)
            try:
                return _cast(v, ty)
            except SplEvalError:
                return None

        return cast, _cast_type(ty)
    assert isinstance(node, Call)
    spec = _FUNCTIONS[node.name]
    n = len(node.args)
    if n < spec.min_args or (spec.max_args >= 0 and n > spec.max_args):
        if spec.max_args < 0:
            wanted = f"at least {spec.min_args}"
        elif spec.min_args == spec.max_args:
            wanted = str(spec.min_args)
        else:
            wanted = f"{spec.min_args} to {spec.max_args}"
        raise SplError(node.pos, f"{node.name}() takes {wanted} argument(s), not {n}")
    compiled = [_compile_expr(a) for a in node.args]
    fns = [f for f, _t in compiled]
    result = spec.result
    if not result:  # coalesce: one type for all arguments
        kinds = {t for _f, t in compiled if t != UNKNOWN}
        if BOOLEAN in kinds and len(kinds) > 1:
            raise SplError(node.pos, f"{node.name}() cannot mix boolean with other types")
        if len(kinds) <= 1:
            result = kinds.pop() if kinds else UNKNOWN
        else:  # strings meet numbers dynamically, as in comparisons
            result = NUMBER if kinds <= set(_NUMERIC) else VARCHAR
    elif node.name == "abs":
        if compiled[0][1] == BOOLEAN:
            raise SplError(node.pos, "abs() needs a number, not boolean")
        result = compiled[0][1] if compiled[0][1] in (BIGINT, DOUBLE) else NUMBER
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


def _time_value(name: str, v: Value) -> str:
    if not isinstance(v, int) or isinstance(v, bool):
        raise SplEvalError(f"{name} must be an integer")
    limit = 2**32 if name == "__time__" else 1_000_000_000
    if not 0 <= v < limit:
        raise SplEvalError(f"{name} {v} is out of range [0, {limit})")
    return str(v)


def _compile_where(ins: Where) -> Stage:
    fn, t = _compile_expr(ins.condition)
    _require_bool(t, ins.condition, "where")

    def where(r: Record) -> Record | None:
        return r if fn(r) is True else None

    return where


def _compile_extend(ins: Extend) -> Stage:
    seen: set[str] = set()
    parts: list[tuple[str, Fn]] = []
    for name, expr in ins.assignments:
        if name.name in seen:
            raise SplError(name.pos, f"field {name.name!r} is assigned twice")
        seen.add(name.name)
        fn, t = _compile_expr(expr)
        if name.name in TIME_FIELDS and t != BIGINT:
            raise SplError(
                expr.pos, f"{name.name} must be assigned an integer (bigint) expression, not {t}"
            )
        parts.append((name.name, fn))

    def extend(r: Record) -> Record | None:
        values = [(name, fn(r)) for name, fn in parts]  # all from the input log
        out = dict(r)
        for name, v in values:
            if name in TIME_FIELDS:
                out[name] = _time_value(name, v)
            elif v is None:
                out.pop(name, None)
            else:
                out[name] = to_text(v)
        return out

    return extend


def _check_renames(renames: Sequence[tuple[Name, Name]]) -> None:
    targets: set[str] = set()
    sources: set[str] = set()
    for new, old in renames:
        for n in (new, old):
            if n.name in TIME_FIELDS:
                raise SplError(n.pos, "time fields cannot be renamed or overwritten")
        if new.name in targets:
            raise SplError(new.pos, f"two fields are renamed to {new.name!r}")
        if old.name in sources:
            raise SplError(old.pos, f"field {old.name!r} is renamed twice")
        targets.add(new.name)
        sources.add(old.name)


def _matcher(names: Sequence[Name], wildcard: bool) -> Callable[[str], bool]:
    exact = {n.name for n in names if not (wildcard and "*" in n.name)}
    patterns = [n.name for n in names if wildcard and "*" in n.name]
    if not patterns:
        return exact.__contains__
    return lambda k: k in exact or any(_glob(k, p) for p in patterns)


def _compile_project(ins: Project) -> Stage:
    _check_renames(ins.renames)
    keep = _matcher(ins.keep, ins.wildcard)
    renames = [(new.name, old.name) for new, old in ins.renames]

    def project(r: Record) -> Record | None:
        out = {k: v for k, v in r.items() if k in TIME_FIELDS or keep(k)}
        for new, old in renames:
            if old in r:
                out[new] = r[old]
        return out

    return project


def _compile_project_away(ins: ProjectAway) -> Stage:
    drop = _matcher(ins.drop, ins.wildcard)

    def project_away(r: Record) -> Record | None:
        return {k: v for k, v in r.items() if k in TIME_FIELDS or not drop(k)}

    return project_away


def _compile_project_rename(ins: ProjectRename) -> Stage:
    _check_renames(ins.renames)
    renames = [(new.name, old.name) for new, old in ins.renames]
    olds = {old for _new, old in renames}

    def project_rename(r: Record) -> Record | None:
        moved = [(new, r[old]) for new, old in renames if old in r]
        out = {k: v for k, v in r.items() if k not in olds}
        out.update(moved)
        return out

    return project_rename


@dataclass(frozen=True, slots=True)
class Program:
    """A compiled statement. `run` raises SplEvalError for a log it cannot evaluate;
    calling the program never raises (such a log gives None, like a filtered one)."""

    text: str
    stages: tuple[Stage, ...]
    filter_only: bool  # only `where`: surviving logs are unchanged

    def run(self, record: Record) -> Record | None:
        out = record
        for stage in self.stages:
            result = stage(out)
            if result is None:
                return None
            out = result
        return out

    def __call__(self, record: Record) -> Record | None:
        try:
            return self.run(record)
        except SplEvalError:
            return None


def _children(node: Expr) -> tuple[Expr, ...]:
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


def _check_depth(root: Expr) -> None:
    """Refuse trees too deep to compile and evaluate recursively (e.g. `a+a+a+...`)."""
    stack = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_TREE_DEPTH:
            raise SplError(node.pos, f"expression deeper than {MAX_TREE_DEPTH} operations")
        stack.extend((child, depth + 1) for child in reversed(_children(node)))


def _compile_instruction(ins: Instruction) -> Stage:
    if isinstance(ins, Where):
        _check_depth(ins.condition)
        return _compile_where(ins)
    if isinstance(ins, Extend):
        for _name, expr in ins.assignments:
            _check_depth(expr)
        return _compile_extend(ins)
    if isinstance(ins, Project):
        return _compile_project(ins)
    if isinstance(ins, ProjectAway):
        return _compile_project_away(ins)
    return _compile_project_rename(ins)


@functools.lru_cache(maxsize=CACHE_SIZE)
def compile(text: str) -> Program:
    """Parse, check and compile a statement (cached); raises SplError."""
    instructions = parse(text)
    stages = tuple(_compile_instruction(i) for i in instructions)
    return Program(text, stages, all(isinstance(i, Where) for i in instructions))
