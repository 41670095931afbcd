"""Tokens of an SPL statement: `tokenize(text)` and how a token is named in a refusal."""

from __future__ import annotations

import re
from dataclasses import dataclass

from loghubd.server.spl.errors import SplError


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
    """The tokens of `text`, ending with an `end` token (raises SplError)."""
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


def describe(tok: Token) -> str:
    """How a refusal names the token it found ("found ...")."""
    if tok.kind == "end":
        return "the end of the statement"
    if tok.kind == "string":
        return f"string '{tok.text[:40]}'"
    if tok.kind == "qident":
        return f'"{tok.text[:40]}"'
    return f"'{tok.text[:40]}'"
