"""Recursive descent from tokens to the syntax tree: `parse(text)`, or SplError with the
position and the reason for anything outside the subset (see the grammar in __init__)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import NoReturn, TypeVar

from loghubd.server.spl.ast import (
    Between,
    Binary,
    Call,
    Cast,
    Expr,
    Extend,
    FieldRef,
    InList,
    Instruction,
    IsNull,
    Like,
    Lit,
    Name,
    Project,
    ProjectAway,
    ProjectRename,
    Unary,
    Where,
)
from loghubd.server.spl.errors import SplError
from loghubd.server.spl.functions import FUNCTIONS
from loghubd.server.spl.lexer import Token, describe, tokenize
from loghubd.server.spl.values import BIGINT_MAX, CAST_TYPES

MAX_STATEMENT_CHARS = 16 * 1024
MAX_DEPTH = 32  # nesting of parentheses / not / unary minus while parsing
STARTS_WITH_STAR = (
    "a statement starts with '*' (search conditions before the first '|' are not supported "
    "when consuming)"
)
INSTRUCTIONS = ("where", "extend", "project", "project-away", "project-rename")
COMPARISONS = ("=", "<>", "!=", "<", "<=", ">", ">=")
_KEYWORDS = frozenset(
    ("and", "or", "not", "like", "in", "is", "null", "true", "false", "between")
) | {"cast", "try_cast", "as"}

T = TypeVar("T")


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
        return self._expect(self.at_op(op), op, context)

    def expect_kw(self, kw: str, context: str) -> Token:
        return self._expect(self.at_kw(kw), kw, context)

    def _expect(self, found: bool, word: str, context: str) -> Token:
        if not found:
            t = self.peek()
            self.fail(t, f"expected '{word}' {context}, found {describe(t)}")
        return self.next()

    @contextlib.contextmanager
    def nested(self, tok: Token) -> Iterator[None]:
        """One more level of parentheses / not / unary sign, refused beyond MAX_DEPTH."""
        self.depth += 1
        if self.depth > MAX_DEPTH:
            self.fail(tok, f"expression nests deeper than {MAX_DEPTH} levels")
        try:
            yield
        finally:
            self.depth -= 1

    def comma_list(self, item: Callable[[], T]) -> list[T]:
        """item (',' item)*"""
        out = [item()]
        while self.at_op(","):
            self.next()
            out.append(item())
        return out

    def name(self, what: str) -> Name:
        t = self.next()
        if t.kind == "qident":
            return Name(t.pos, t.text)
        if t.kind == "ident":
            if t.text.lower() in _KEYWORDS:
                self.fail(t, f"'{t.text}' is a keyword; write \"{t.text}\" for such a field")
            return Name(t.pos, t.text)
        self.fail(t, f"expected {what}, found {describe(t)}")

    # -- statement

    def statement(self) -> tuple[Instruction, ...]:
        first = self.next()  # the '*' (`parse` refused a statement without it)
        assert first.kind == "op" and first.text == "*", first
        out: list[Instruction] = []
        while self.at_op("|"):
            self.next()
            out.append(self.instruction())
        t = self.peek()
        if t.kind != "end":
            self.fail(t, f"expected '|' or the end of the statement, found {describe(t)}")
        return tuple(out)

    def instruction(self) -> Instruction:
        t = self.next()
        if t.kind != "ident":
            self.fail(t, f"expected an instruction after '|', found {describe(t)}")
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
            context = "after the field name (extend field = expression)"
            return Extend(t.pos, tuple(self.assignments(context, self.expr)))
        if kind == "project":
            wildcard = self.wildcard_flag()
            items = self.comma_list(self.project_item)
            keep = tuple(field for field, old in items if old is None)
            renames = tuple((field, old) for field, old in items if old is not None)
            return Project(t.pos, keep, renames, wildcard)
        if kind == "project-away":
            wildcard = self.wildcard_flag()
            drop = self.comma_list(lambda: self.name("a field name"))
            return ProjectAway(t.pos, tuple(drop), wildcard)
        if kind == "project-rename":
            context = "after the new field name (project-rename new = old)"
            return ProjectRename(t.pos, tuple(self.assignments(context, self.renamed)))
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

    def renamed(self) -> Name:
        return self.name("the field to rename")

    def project_item(self) -> tuple[Name, Name | None]:
        """`field` (kept) or `new = old` (renamed): (field, None) or (new, old)."""
        field = self.name("a field name")
        if not self.at_op("="):
            return field, None
        self.next()
        return field, self.renamed()

    def assignments(self, context: str, value: Callable[[], T]) -> list[tuple[Name, T]]:
        """field '=' value (',' field '=' value)*; `context` explains a missing '='."""

        def assignment() -> tuple[Name, T]:
            field = self.name("a field name")
            self.expect_op("=", context)
            return field, value()

        return self.comma_list(assignment)

    # -- expressions

    def expr(self) -> Expr:
        with self.nested(self.peek()):
            return self.or_expr()

    def chain(self, operand: Callable[[], Expr], *ops: str) -> Expr:
        """operand (op operand)*, left-associative; `ops` are operators or keywords."""
        left = operand()
        while self.at_op(*ops) or self.at_kw(*ops):
            op = self.next()
            left = Binary(left.pos, op.text.lower(), left, operand(), op.pos)
        return left

    def or_expr(self) -> Expr:
        return self.chain(self.and_expr, "or")

    def and_expr(self) -> Expr:
        return self.chain(self.not_expr, "and")

    def not_expr(self) -> Expr:
        if self.at_kw("not"):
            op = self.next()
            with self.nested(op):
                return Unary(op.pos, "not", self.not_expr())
        return self.predicate()

    def predicate(self) -> Expr:
        left = self.concat()
        if self.at_op(*COMPARISONS):
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
            items = self.comma_list(self.expr)
            self.expect_op(")", "to close the 'in' list")
            return InList(left.pos, left, tuple(items), negated)
        if self.at_kw("between"):
            self.next()
            low = self.concat()
            self.expect_kw("and", "between the bounds of 'between'")
            return Between(left.pos, left, low, self.concat(), negated)
        return left

    def concat(self) -> Expr:
        return self.chain(self.sum, "||")

    def sum(self) -> Expr:
        return self.chain(self.term, "+", "-")

    def term(self) -> Expr:
        return self.chain(self.unary, "*", "/", "%")

    def unary(self) -> Expr:
        if self.at_op("-", "+"):
            op = self.next()
            with self.nested(op):
                operand = self.unary()
            return Unary(op.pos, op.text, operand)
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
            return self.word(t)
        self.fail(t, f"expected a value, a field or '(', found {describe(t)}")

    def word(self, t: Token) -> Expr:
        """A primary starting with an identifier: literal keyword, cast, call or field."""
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
            if ty.kind != "ident" or ty.text.lower() not in CAST_TYPES:
                self.fail(
                    ty, f"unsupported type {describe(ty)} (supported: {', '.join(CAST_TYPES)})"
                )
            self.expect_op(")", f"to close {word}(...)")
            return Cast(t.pos, operand, ty.text.lower(), word == "try_cast")
        if self.at_op("("):
            if word not in FUNCTIONS:
                self.fail(
                    t,
                    f"unknown function '{t.text[:40]}' (supported: cast, try_cast, "
                    f"{', '.join(sorted(FUNCTIONS))})",
                )
            self.next()
            args = [] if self.at_op(")") else self.comma_list(self.expr)
            self.expect_op(")", f"to close {word}(...)")
            return Call(t.pos, word, tuple(args))
        if word in _KEYWORDS:
            self.fail(t, f"unexpected keyword '{t.text}'")
        return FieldRef(t.pos, t.text)


def parse(text: str) -> tuple[Instruction, ...]:
    """The instructions of a statement (raises SplError)."""
    if len(text) > MAX_STATEMENT_CHARS:
        raise SplError(0, f"statement longer than {MAX_STATEMENT_CHARS} characters")
    _check_start(text)
    return _Parser(text).statement()


def _check_start(text: str) -> None:
    """Refuse a statement that does not start with '*' before it is tokenized: its first
    segment is then an SLS search (`level: ERROR`, the form users bring from SLS), whose
    characters the lexer would refuse first ("unexpected character ':'"), hiding the reason.
    Only the first character is looked at: a lexer error after the '*' keeps its position."""
    start = len(text) - len(text.lstrip())
    if not text.startswith("*", start):
        raise SplError(start, STARTS_WITH_STAR)
