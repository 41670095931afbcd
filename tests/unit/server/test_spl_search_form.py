"""SPL refusals of the SLS search form: a statement whose first segment
is not `*` gets "a statement starts with '*'" at that segment, however it would tokenize,
and lexer errors after the `*` keep their positions."""

from __future__ import annotations

import pytest

from loghubd.server import spl

STARTS = "a statement starts with '*' (search conditions before the first '|'"


@pytest.mark.parametrize(
    ("statement", "position"),
    [
        ("level: ERROR", 0),  # the SLS search form: ':' used to be a lexer error at 5
        ("level:ERROR and status > 500", 0),
        ("  level: ERROR | where a = 1", 2),  # at the first non-blank character
        ("\tlevel: ERROR", 1),
        ("# comment", 0),
        ("'ERROR' | where a = 1", 0),
        ("level = 'ERROR", 0),  # an unterminated string after a search condition
        ("", 0),
        ("   ", 3),
    ],
)
def test_a_statement_not_starting_with_a_star_says_so(statement: str, position: int) -> None:
    with pytest.raises(spl.SplError) as caught:
        spl.compile(statement)
    assert caught.value.position == position
    assert caught.value.reason.startswith(STARTS)


@pytest.mark.parametrize(
    ("statement", "position", "reason"),
    [
        ("* | where level: 'x'", 15, "unexpected character ':'"),
        ("  * | where a = 1 # x", 18, "unexpected character '#'"),
        ("* | where level = 'x", 18, "unterminated string literal"),
        ("*level", 1, "expected '|' or the end of the statement, found 'level'"),
    ],
)
def test_errors_after_the_star_keep_their_position(
    statement: str, position: int, reason: str
) -> None:
    with pytest.raises(spl.SplError) as caught:
        spl.compile(statement)
    assert (caught.value.position, caught.value.reason[: len(reason)]) == (position, reason)


def test_statements_starting_with_a_star_still_compile() -> None:
    assert spl.compile("*") is not None
    assert spl.compile("  * | where level = 'ERROR'") is not None
