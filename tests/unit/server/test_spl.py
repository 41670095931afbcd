"""The SPL subset of `loghubd serve` (loghubd/server/spl/), table by table: every construct
of the grammar, precedence, the three-valued logic of SQL, every function, every refusal with
its position, and properties over arbitrary records."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loghubd.server import spl

RECORD = {
    "__time__": "1700000000",
    "__topic__": "t",
    "__source__": "10.0.0.1",
    "__tag__:host": "h1",
    "level": "ERROR",
    "status": "500",
    "latency": "12.5",
    "msg": "disk full on /dev/sda",
    "user": "alice",
    "empty": "",
    "a b": "spaced",
}

FAIL = "fail"  # the log's evaluation fails: dropped and counted as failed


def where(condition: str, record: dict[str, str] = RECORD) -> bool | str:
    """True/False: kept/dropped by `* | where <condition>`; FAIL: evaluation error."""
    program = spl.compile(f"* | where {condition}")
    try:
        result = program.run(dict(record))
    except spl.SplEvalError:
        assert program(dict(record)) is None  # calling never raises
        return FAIL
    assert result is None or result == record  # where never changes a log
    return result is not None


# -- where: every construct -------------------------------------------------------------------

WHERE = [
    # comparisons: strings compare as strings, a string against a number numerically
    ("level = 'ERROR'", True),
    ("level <> 'ERROR'", False),
    ("level != 'INFO'", True),
    ("status > 404", True),
    ("status >= 500", True),
    ("status < 500", False),
    ("status <= 500", True),
    ("status > '6'", False),  # string order: '500' < '6'
    ("status = 500.0", True),
    ("latency > 12", True),
    ("latency = 12.5", True),
    ("500 = status", True),
    ("'ERROR' = level", True),
    # literals
    ("1 = 1", True),
    ("'it''s' = 'it' || '''s'", True),
    ("-5 < 0", True),
    ("1.5e1 = 15", True),
    (".5 = 0.5", True),
    ("00042 = 42", True),
    ("true", True),
    ("false", False),
    ("null", False),
    ("TRUE and not FALSE", True),
    # fields: bare, double-quoted, the flattened meta fields
    ("\"level\" = 'ERROR'", True),
    ("\"a b\" = 'spaced'", True),
    ("\"__tag__:host\" = 'h1'", True),
    ("__topic__ = 't'", True),
    ("__source__ = '10.0.0.1'", True),
    ("__time__ > 1600000000", True),
    ("__time__ = 1700000000", True),
    ("empty = ''", True),
    ('level = "ERROR"', False),  # "ERROR" names a field (absent): null
    ("nope = 'x'", False),
    ("nope <> 'x'", False),  # null, not true
    # is [not] null
    ("nope is null", True),
    ("level is null", False),
    ("level is not null", True),
    ("empty IS NOT NULL", True),
    # like
    ("msg like '%disk%'", True),
    ("msg like 'disk%'", True),
    ("msg like '%sda'", True),
    ("msg like 'disk'", False),
    ("level like 'E_ROR'", True),
    ("level like 'E___OR'", False),
    ("level like 'e%'", False),  # case-sensitive
    ("msg like '%d%s%k%'", True),
    ("msg like '%_/dev/%'", True),
    ("msg not like '%cpu%'", True),
    ("level like '%'", True),
    ("empty like '%'", True),
    ("empty like '_'", False),
    ("nope like '%'", False),
    ("status like '5%'", True),
    # in
    ("level in ('WARN', 'ERROR')", True),
    ("level not in ('WARN', 'ERROR')", False),
    ("level in ('WARN')", False),
    ("status in (404, 500)", True),
    ("status in ('404', '500')", True),
    ("nope in ('x')", False),
    ("level in ('x', null)", False),  # null
    ("not (level in ('x', null))", False),  # not null is null
    ("level in ('ERROR', null)", True),
    ("level in (upper('error'))", True),
    # between
    ("status between 400 and 599", True),
    ("status not between 400 and 499", True),
    ("latency between 12 and 13", True),
    ("status between 501 and 600", False),
    ("level between 'A' and 'F'", True),
    ("status between nope and 600", False),  # null
    ("status between 501 and nope", False),  # false and null is false
    # and / or / not, precedence and SQL's three-valued logic
    ("level = 'ERROR' and status = 500", True),
    ("level = 'INFO' or status = 500", True),
    ("not level = 'INFO'", True),
    ("not (level = 'ERROR')", False),
    ("level = 'INFO' and status = 404 or user = 'alice'", True),  # and binds tighter
    ("level = 'INFO' and (status = 404 or user = 'alice')", False),
    ("user = 'alice' or level = 'INFO' and status = 404", True),
    ("not level = 'INFO' and user = 'bob'", False),  # not binds tighter than and
    ("not (level = 'INFO' and user = 'bob')", True),
    ("level = 'ERROR' or nope = 'x'", True),  # true or null
    ("level = 'INFO' or nope = 'x'", False),  # false or null is null
    ("level = 'INFO' and nope = 'x'", False),
    ("not (level = 'INFO' or nope = 'x')", False),  # not null is null
    ("not (level = 'INFO' and nope = 'x')", True),  # not false
    ("level = 'ERROR' AND NOT status = 404", True),  # keywords in any case
    ("((level = 'ERROR'))", True),
    # arithmetic: bigint stays bigint, / truncates, % takes the dividend's sign
    ("status + 1 = 501", True),
    ("status - 1 = 499", True),
    ("status * 2 = 1000", True),
    ("status / 3 = 166", True),
    ("-7 / 2 = -3", True),
    ("-7 % 3 = -1", True),
    ("status % 7 = 3", True),
    ("7.0 / 2 = 3.5", True),
    ("latency * 2 = 25", True),
    ("1 + 2 * 3 = 7", True),
    ("(1 + 2) * 3 = 9", True),
    ("10 - 2 - 3 = 5", True),
    ("-status = -500", True),
    ("+status = 500", True),
    ("- -status = 500", True),
    ("1.0 / 0 > 1000000", True),  # doubles: Infinity
    ("nope + 1 is null", True),
    # || (concatenation binds looser than + and -)
    ("level || '!' = 'ERROR!'", True),
    ("'a' || 1 = 'a1'", True),
    ("'x' || 1 + 1 = 'x2'", True),
    ("'v' || 1.5 = 'v1.5'", True),
    ("'b' || (1 = 1) = 'btrue'", True),
    ("user || nope is null", True),
    # casts (any case), try_cast
    ("cast(status as bigint) = 500", True),
    ("CAST(status AS BIGINT) = 500", True),
    ("cast(status as integer) = 500", True),
    ("cast(status as int) = 500", True),
    ("cast(status as smallint) = 500", True),
    ("cast(status as tinyint) = 1", FAIL),  # out of range
    ("cast(latency as double) > 12.4", True),
    ("cast(latency as real) = 12.5", True),
    ("cast(status as varchar) = '500'", True),
    ("cast(500 as varchar) = '500'", True),
    ("cast(2.5 as varchar) = '2.5'", True),
    ("cast(latency as bigint) = 12", FAIL),  # '12.5' is not an integer
    ("cast(1.5 as bigint) = 2", True),  # doubles round half away from zero
    ("cast(-1.5 as bigint) = -2", True),
    ("cast(' 7 ' as bigint) = 7", True),
    ("cast('true' as boolean)", True),
    ("cast('f' as boolean)", False),
    ("cast(0 as boolean)", False),
    ("cast(user as boolean)", FAIL),
    ("cast(user as bigint) > 0", FAIL),
    ("try_cast(user as bigint) is null", True),
    ("try_cast(user as integer) > 0", False),
    ("try_cast(status as bigint) = 500", True),
    ("cast(nope as bigint) is null", True),
    ("cast('NaN' as double) = cast('NaN' as double)", False),
    # functions
    ("lower(level) = 'error'", True),
    ("upper(user) = 'ALICE'", True),
    ("length(user) = 5", True),
    ("length(empty) = 0", True),
    ("trim('  a ') = 'a'", True),
    ("concat(level, '-', user) = 'ERROR-alice'", True),
    ("concat(level, nope) is null", True),
    ("substr(msg, 1, 4) = 'disk'", True),
    ("substr(msg, 6) = 'full on /dev/sda'", True),
    ("substr(msg, -3) = 'sda'", True),
    ("substr(msg, 0) = ''", True),
    ("substr(msg, 99) = ''", True),
    ("substr(msg, 1.5) = ''", FAIL),
    ("substr(msg, 1, -1) = ''", FAIL),
    ("replace(msg, 'disk', 'tape') like 'tape%'", True),
    ("replace(user, 'a') = 'lice'", True),
    ("strpos(msg, 'full') = 6", True),
    ("strpos(msg, 'cpu') = 0", True),
    ("starts_with(msg, 'disk')", True),
    ("starts_with(msg, 'full')", False),
    ("abs(-3) = 3", True),
    ("abs(-2.5) = 2.5", True),
    ("abs('-4') = 4", True),
    ("coalesce(nope, user) = 'alice'", True),
    ("coalesce(nope, null) is null", True),
    ("coalesce(status, 0) = 500", True),
    ("coalesce(nope, 7) = 7", True),
    ("coalesce(status, cast(user as bigint)) = 500", True),  # lazy: no failure
    ("LOWER(level) = 'error'", True),
    # evaluation failures: the log is dropped and counted, never an exception
    ("user > 5", FAIL),  # 'alice' is not a number
    ("status / 0 = 1", FAIL),
    ("status % 0 = 1", FAIL),
    ("cast(user as double) > 1", FAIL),
    ("user + 1 = 2", FAIL),
    ("status * 9223372036854775807 > 0", FAIL),  # bigint overflow
    # ... unless nothing needs the failing part (and/or short-circuit)
    ("level = 'INFO' and user > 5", False),
    ("level = 'ERROR' or user > 5", True),
]


@pytest.mark.parametrize(("condition", "expected"), WHERE, ids=[c for c, _ in WHERE])
def test_where(condition: str, expected: bool | str) -> None:
    assert where(condition) == expected


def test_time_fields_are_integers() -> None:
    bad = {**RECORD, "__time__": "soon"}
    assert where("__time__ > 0", bad) == FAIL
    assert where("level = 'ERROR'", bad) is True  # not read: no failure
    assert where("__time_ns_part__ is null") is True
    assert where("__time_ns_part__ = 5", {**RECORD, "__time_ns_part__": "5"}) is True


# -- extend / project / project-away / project-rename / pipelines ----------------------------

T = {"__time__": "1700000000"}
TAGS = {"__topic__": "t", "__source__": "10.0.0.1", "__tag__:host": "h1"}

TRANSFORM = [
    ("*", RECORD),
    ("* | extend a = 'x'", {**RECORD, "a": "x"}),
    (
        "* | extend s2 = cast(status as bigint) * 2, tag = upper(level) || '!'",
        {**RECORD, "s2": "1000", "tag": "ERROR!"},
    ),
    ("* | extend level = lower(level)", {**RECORD, "level": "error"}),
    ("* | extend r = cast(status as double) / 4", {**RECORD, "r": "125.0"}),
    ("* | extend b = status > 400, c = nope = 'x'", {**RECORD, "b": "true"}),
    ("* | extend n = nope", RECORD),  # null: no field
    ("* | extend level = null", {k: v for k, v in RECORD.items() if k != "level"}),
    ("* | extend a = status, b = a", {**RECORD, "a": "500"}),  # all from the input log
    (
        '* | extend "new field" = 1, "__tag__:zone" = \'z1\'',
        {**RECORD, "new field": "1", "__tag__:zone": "z1"},
    ),
    ("* | extend __time__ = __time__ + 60", {**RECORD, "__time__": "1700000060"}),
    ("* | extend __time_ns_part__ = 5", {**RECORD, "__time_ns_part__": "5"}),
    ("* | extend x = status / 0", FAIL),
    ("* | extend __time__ = -1", FAIL),
    ("* | extend __time__ = __time__ * 10", FAIL),  # beyond uint32
    ("* | extend __time_ns_part__ = 1000000000", FAIL),
    ("* | extend __time__ = cast(nope as bigint)", FAIL),  # time cannot be null
    ("* | project level, status", {**T, "level": "ERROR", "status": "500"}),
    ("* | project status, level", {**T, "level": "ERROR", "status": "500"}),  # log order
    ("* | project lvl = level", {**T, "lvl": "ERROR"}),
    ("* | project level, lvl = level", {**T, "level": "ERROR", "lvl": "ERROR"}),
    ("* | project lvl = nope", T),  # renaming an absent field: nothing
    ("* | project nope", T),
    ('* | project "__tag__:host", "a b"', {**T, "__tag__:host": "h1", "a b": "spaced"}),
    ('* | project "__tag__:*"', T),  # without -wildcard a * is a character
    ('* | project -wildcard "__tag__:*", level', {**T, "__tag__:host": "h1", "level": "ERROR"}),
    ('* | project -wildcard "l*"', {**T, "level": "ERROR", "latency": "12.5"}),
    (
        '* | project -wildcard "*e*", __time__',
        {
            **T,
            "level": "ERROR",
            "user": "alice",
            "latency": "12.5",
            "__source__": "10.0.0.1",
            "empty": "",
        },
    ),
    ("* | project __time__", T),
    (
        "* | project-away msg, user, nope",
        {k: v for k, v in RECORD.items() if k not in ("msg", "user")},
    ),
    (
        '* | project-away -wildcard "__*__"',
        {k: v for k, v in RECORD.items() if k not in ("__topic__", "__source__")},
    ),
    ("* | project-away __time__", RECORD),  # time fields are always kept
    (
        "* | project-rename lvl = level",
        {**{k: v for k, v in RECORD.items() if k != "level"}, "lvl": "ERROR"},
    ),
    (
        "* | project-rename user = level",
        {**{k: v for k, v in RECORD.items() if k not in ("level", "user")}, "user": "ERROR"},
    ),
    ("* | project-rename x = nope", RECORD),
    # pipelines: each instruction sees the previous one's output
    (
        "* | where status >= 500 | extend s = cast(status as bigint) + 1 | project s, level",
        {**T, "level": "ERROR", "s": "501"},
    ),
    ("* | extend a = 'x' | extend b = a || 'y' | project b", {**T, "b": "xy"}),
    ("* | project level | where level = 'ERROR'", {**T, "level": "ERROR"}),
    ("* | project level | where user = 'alice'", None),  # user is gone
    ("* | where level = 'INFO' | extend a = 1", None),
    ("* | where level = 'ERROR' | where status = 404", None),
    ("* | extend s = cast(status as bigint) | where s > 499", {**RECORD, "s": "500"}),
    ("* | project-away msg | project-rename m = user | project m", {**T, "m": "alice"}),
]


@pytest.mark.parametrize(("statement", "expected"), TRANSFORM, ids=[s for s, _ in TRANSFORM])
def test_transform(statement: str, expected: dict[str, str] | str | None) -> None:
    program = spl.compile(statement)
    record = dict(RECORD)
    if expected == FAIL:
        with pytest.raises(spl.SplEvalError):
            program.run(record)
        assert program(record) is None
    else:
        assert program.run(record) == expected
    assert record == RECORD  # the input log is never modified


def test_project_keeps_the_log_order_then_renames() -> None:
    out = spl.compile("* | project user, x = level, level").run(dict(RECORD))
    assert out is not None
    assert list(out) == ["__time__", "level", "user", "x"]


def test_filter_only_flag_and_cache() -> None:
    assert spl.compile("*").filter_only
    assert spl.compile("* | where a = '1' | where b = '2'").filter_only
    assert not spl.compile("* | where a = '1' | project a").filter_only
    assert spl.compile("* | where a = '1'") is spl.compile("* | where a = '1'")  # LRU
    assert spl.compile.cache_info().maxsize == spl.CACHE_SIZE


# -- refusals: position and reason --------------------------------------------------------------


@dataclass(frozen=True)
class Refusal:
    statement: str
    at: str | int | None  # the text the error points at (its first occurrence), an offset,
    reason: str  # or None for the end of the statement


LONG_CHAIN = "* | where a" + " + a" * (spl.MAX_TREE_DEPTH + 1) + " = 1"
DEEP = "* | where " + "(" * (spl.MAX_DEPTH + 1) + "a = 1" + ")" * (spl.MAX_DEPTH + 1)

REFUSALS = [
    # the statement
    Refusal("", None, "a statement starts with '*'"),
    Refusal("where a = 1", 0, "a statement starts with '*'"),
    Refusal("level:ERROR", 0, "a statement starts with '*'"),
    Refusal("* where a = 1", "where", "expected '|' or the end of the statement, found 'where'"),
    Refusal("* |", None, "expected an instruction after '|', found the end of the statement"),
    Refusal("* | where a = '1' | *", 20, "expected an instruction after '|', found '*'"),
    Refusal("* | parse-json content", "parse-json", "instruction 'parse-json' is not supported"),
    Refusal("* | stats count(*) by level", "stats", "instruction 'stats' is not supported"),
    Refusal("* | WHERE-x a", "WHERE", "instruction 'WHERE-x' is not supported"),
    Refusal("*" + " " * spl.MAX_STATEMENT_CHARS, 0, "statement longer than"),
    # tokens
    Refusal("* | where level = 'ERROR", "'ERROR", "unterminated string literal"),
    Refusal('* | where "level = 1', '"', "unterminated quoted field name"),
    Refusal('* | where "" = 1', '"', "empty field name"),
    Refusal("* | where level == 'x'", "==", "'==' is not SPL: compare with '='"),
    Refusal("* | where a = 12abc", "12abc", "invalid number '12a'"),
    Refusal("* | where a = 1.2.3", "1.2.3", "invalid number"),
    Refusal("* | where a = 1 # note", "#", "unexpected character '#'"),
    Refusal("* | where a = 99999999999999999999", "9999", "out of the bigint range"),
    Refusal("* | where a = 1e999", "1e999", "out of the double range"),
    # where: syntax
    Refusal("* | where", None, "expected a value, a field or '(', found the end"),
    Refusal("* | where a = 1 b", " b", "expected '|' or the end of the statement, found 'b'"),
    Refusal("* | where (level = 'x'", None, "expected ')' to close '('"),
    Refusal("* | where level = 'x' and", None, "expected a value"),
    Refusal("* | where and = 1", "and", "unexpected keyword 'and'"),
    Refusal("* | where level in 'x'", "'x'", "expected '(' after 'in'"),
    Refusal("* | where level in ('x'", None, "expected ')' to close the 'in' list"),
    Refusal("* | where level is 'x'", "'x'", "expected 'null' after 'is'"),
    Refusal("* | where status between 1", None, "expected 'and' between the bounds"),
    Refusal("* | where level not 'x'", "not", "expected '|' or the end of the statement"),
    Refusal("* | where a = 1 = 2", "= 2", "found '='"),
    Refusal("* | where cast(status as number) > 1", "number", "unsupported type 'number'"),
    Refusal("* | where cast(status, bigint) > 1", ",", "expected 'as' in cast(value as type)"),
    Refusal("* | where cast(status as bigint > 1", ">", "expected ')' to close cast(...)"),
    Refusal("* | where md5(level) = 'x'", "md5", "unknown function 'md5'"),
    Refusal("* | where lower(level = 'x'", None, "expected ')' to close lower(...)"),
    # where: types
    Refusal("* | where level", "level", "where needs a condition (a boolean expression)"),
    Refusal("* | where 1", "1", "where needs a condition"),
    Refusal("* | where level = 'x' and status", "status", "'and' needs a condition"),
    Refusal("* | where status or level = 'x'", "status", "'or' needs a condition"),
    Refusal("* | where not status", "status", "not needs a condition"),
    Refusal("* | where (level = 'x') = 'y'", "= 'y'", "cannot compare boolean with varchar"),
    Refusal("* | where level in ('x', 1 = 1)", "1 = 1", "cannot compare varchar with boolean"),
    Refusal("* | where (level = 'x') + 1 = 2", "+", "'+' needs numbers, not boolean"),
    Refusal("* | where -(level = 'x')", "-", "'-' needs a number, not boolean"),
    Refusal("* | where length(level, 2) = 1", "length", "length() takes 1 argument(s), not 2"),
    Refusal("* | where concat(level) = 'x'", "concat", "takes at least 2 argument(s), not 1"),
    Refusal("* | where substr(level) = 'x'", "substr", "takes 2 to 3 argument(s), not 1"),
    Refusal("* | where coalesce(level, 1 = 1) = 'x'", "coalesce", "cannot mix boolean"),
    Refusal("* | where abs(level = 'x') = 1", "abs", "abs() needs a number"),
    Refusal(DEEP, len("* | where ") + spl.MAX_DEPTH, "nests deeper than"),  # the 33rd (
    Refusal(LONG_CHAIN, "a +", "expression deeper than"),
    # extend
    Refusal("* | extend = 1", "=", "expected a field name, found '='"),
    Refusal("* | extend a 1", "1", "expected '=' after the field name"),
    Refusal("* | extend a = 1, a = 2", "a = 2", "field 'a' is assigned twice"),
    Refusal("* | extend __time__ = '1'", "'1'", "__time__ must be assigned an integer"),
    Refusal("* | extend __time__ = 1.5", "1.5", "must be assigned an integer (bigint)"),
    Refusal("* | extend __time_ns_part__ = status", "status", "must be assigned an integer"),
    Refusal("* | extend and = 1", "and", "'and' is a keyword; write \"and\""),
    Refusal("* | extend a = ", None, "expected a value"),
    # project, project-away, project-rename
    Refusal("* | project", None, "expected a field name, found the end"),
    Refusal("* | project a,", None, "expected a field name"),
    Refusal("* | project 'a'", "'a'", "expected a field name, found string 'a'"),
    Refusal("* | project a = b, c = b", 23, "field 'b' is renamed twice"),  # the 2nd b
    Refusal("* | project a = b, a = c", "a = c", "two fields are renamed to 'a'"),
    Refusal("* | project t = __time__", "__time__", "time fields cannot be renamed"),
    Refusal("* | project __time__ = a", "__time__", "time fields cannot be renamed"),
    Refusal("* | project-away", None, "expected a field name"),
    Refusal("* | project-away a = b", "=", "expected '|' or the end of the statement"),
    Refusal("* | project-rename a", None, "expected '=' after the new field name"),
    Refusal("* | project-rename a = __time_ns_part__", "__time_ns", "cannot be renamed"),
    Refusal("* | project-rename a = b, a = c", "a = c", "two fields are renamed to 'a'"),
]


def _position(r: Refusal) -> int:
    if r.at is None:
        return len(r.statement)
    if isinstance(r.at, int):
        return r.at
    found = r.statement.find(r.at)
    assert found >= 0, f"{r.at!r} is not in the statement"
    return found + (1 if r.at.startswith(" ") else 0)


@pytest.mark.parametrize("refusal", REFUSALS, ids=[r.statement[:60] for r in REFUSALS])
def test_refusal(refusal: Refusal) -> None:
    with pytest.raises(spl.SplError) as info:
        spl.compile(refusal.statement)
    err = info.value
    position = _position(refusal)
    assert (err.position, str(err)[: len(f"position {position}:")]) == (
        position,
        f"position {position}:",
    ), str(err)
    assert refusal.reason in err.reason, str(err)


def test_every_instruction_and_function_is_covered() -> None:
    """The tables above exercise the whole documented subset."""
    text = " ".join(
        [c for c, _ in WHERE] + [s for s, _ in TRANSFORM] + [r.statement for r in REFUSALS]
    ).lower()
    for name in [*spl.INSTRUCTIONS, *spl._FUNCTIONS, "cast(", "try_cast(", "-wildcard"]:
        assert name in text, name
    for op in ("<>", "!=", "<=", ">=", "||", " like ", " in (", " between ", " is null"):
        assert op in text, op
    for ty in spl._CAST_TYPES:
        assert f" as {ty})" in text, ty


# -- like against a regex reference -------------------------------------------------------------


def _like_reference(text: str, pattern: str) -> bool:
    body = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern)
    return re.fullmatch(body, text, re.DOTALL) is not None


@given(st.text(alphabet="ab%_\n", max_size=12), st.text(alphabet="ab\n", max_size=12))
def test_like_matches_the_reference(pattern: str, text: str) -> None:
    assert spl.like(text, pattern) == _like_reference(text, pattern)


def test_like_is_not_quadratic_in_python() -> None:
    text = "a" * 200_000
    assert not spl.like(text, "%a%a%a%a%a%b")
    assert spl.like(text + "b", "%a_a%a%b")


# -- properties ---------------------------------------------------------------------------------

FIELDS = ["level", "status", "msg", "nope", "__time__", '"__tag__:host"', '"a b"']
RECORD_KEYS = ["level", "status", "msg", "__time__", "__time_ns_part__", "__tag__:host", "a b"]


def _sql_string(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


literals = st.one_of(
    st.text(max_size=8).map(_sql_string),
    st.integers(-(2**63) + 1, 2**63 - 1).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.just("null"),
)
fields = st.sampled_from(FIELDS)
numeric_types = st.sampled_from(["bigint", "integer", "tinyint", "double", "real", "varchar"])
operands = st.one_of(
    fields,
    literals,
    st.builds("cast({} as {})".format, fields, numeric_types),
    st.builds("try_cast({} as {})".format, fields, numeric_types),
    st.builds("lower({})".format, fields),
    st.builds("length({})".format, fields),
    st.builds("({} || {})".format, fields, literals),
    st.builds("({} + {})".format, fields, literals),
    st.builds("({} / {})".format, fields, literals),
    st.builds("({} % {})".format, fields, literals),
    st.builds("substr({}, {})".format, fields, literals),
    st.builds("coalesce({}, {})".format, fields, fields),
)
comparisons = st.one_of(
    st.builds(
        "{} {} {}".format,
        operands,
        st.sampled_from(["=", "<>", "!=", "<", "<=", ">", ">="]),
        operands,
    ),
    st.builds(
        "{} like {}".format, operands, st.text(alphabet="ab%_'", max_size=6).map(_sql_string)
    ),
    st.builds("{} not in ({}, {})".format, operands, literals, literals),
    st.builds("{} between {} and {}".format, operands, literals, literals),
    st.builds("{} is not null".format, operands),
)
records = st.dictionaries(st.sampled_from(RECORD_KEYS), st.text(max_size=12), max_size=7)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(comparisons, st.lists(comparisons, max_size=2), records)
def test_where_never_raises_on_arbitrary_records(
    first: str, more: list[str], record: dict[str, str]
) -> None:
    condition = " and ".join([first, *(f"not ({m})" for m in more)])
    program = spl.compile(f"* | where {condition}")
    before = dict(record)
    result = program(record)
    assert result is None or result is record
    assert record == before
    try:
        assert program.run(record) in (None, record)
    except spl.SplEvalError:
        assert result is None


@settings(max_examples=300)
@given(
    st.text(
        alphabet=st.sampled_from(list("*| ()'\",=<>!+-%_.0123456789aelnorswhiteupjcy")), max_size=40
    )
)
def test_the_parser_only_raises_spl_errors(text: str) -> None:
    error: spl.SplError | None = None
    try:
        spl.compile(text)
    except spl.SplError as exc:
        error = exc
    if error is not None:
        assert 0 <= error.position <= len(text)
        assert str(error).startswith(f"position {error.position}: ")
