"""Checking a processor's own `[processor.<name>]` table: unknown keys and wrong types are
refused, every one of the table at once, each message naming the key and quoting the value
in the words of a config file (`expected a number, got a string '60s'`).

The daemon's config freezes a processor's table (loghubd/config/sections.py): a TOML array
arrives as a tuple and a table as a read-only mapping. So `list` here accepts a tuple too, and
a table is checked as `Mapping`, whether the options came from a file or from Python.

A plugin's processor uses the same helpers (this module is public, like `ConfigError`, which
it re-exports): `check_options` when the types are all it checks; `typed_options` and
`option_problem` when it checks values too and reports every problem of its table in one
`ConfigError`, type problems and value problems together (see `typed_options`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loghubd.config.redact import described
from loghubd.config.values import ConfigError, _suggest

__all__ = ["ConfigError", "Types", "check_options", "expected", "option_problem", "typed_options"]

Types = type | tuple[type, ...]

# How a message names what a key takes; a type not listed here is named by its Python name.
_WORDS: dict[type, str] = {
    str: "a string",
    bool: "true or false",
    int: "an integer",
    float: "a number",
    list: "a list",
    Mapping: "a table",
    dict: "a table",
}


def expected(types: Types) -> str:
    """What a key of `types` takes, as a config file says it: `a string or a list`; int and
    float together are `a number`."""
    named = types if isinstance(types, tuple) else (types,)
    if int in named and float in named:
        named = tuple(t for t in named if t is not int)
    words = (_WORDS.get(t, f"a {t.__name__}") for t in named)
    return " or ".join(dict.fromkeys(words))


def check_options(name: str, options: Mapping[str, Any], allowed: Mapping[str, Types]) -> None:
    """Refuse unknown keys and wrong types in a processor's own table: one `ConfigError` (a
    ValueError) with a line per bad key, each naming it, in the table's order.

    `true` is not taken for an integer (Python's bool is an int) unless bool is allowed."""
    problems: list[str] = []
    typed_options(name, options, allowed, problems)
    if problems:
        raise ConfigError(problems)


def typed_options(
    name: str, options: Mapping[str, Any], allowed: Mapping[str, Types], problems: list[str]
) -> dict[str, Any]:
    """The keys of `options` that are in `allowed` and whose value has one of its types; one
    line appended to `problems` for every other key, in the table's order, worded as
    `check_options` words them (`processor.<name>.<key>: unknown key (did you mean ...?)`,
    `processor.<name>.<key>: expected a number, got a string '60s'`).

    For a processor (built in or a plugin's) that checks values as well as types and reports
    every problem of its table at once: check the values of what this returns, so that a key
    of the wrong type is named once, by its type problem (it is left out, as if not given);
    add each value problem with `option_problem`; raise one `ConfigError` at the end:

        from loghubd.processors.options import ConfigError, option_problem, typed_options

        def parse(options):
            problems: list[str] = []
            given = typed_options("mine", options, {"path": str, "max_rows": int}, problems)
            if "path" not in options:
                problems.append(option_problem("mine", "path", "required"))
            rows = given.get("max_rows", 1000)
            if rows < 1:
                problems.append(option_problem("mine", "max_rows", "must be >= 1", rows))
            if problems:
                raise ConfigError(problems)  # a ValueError: check-config prints each line
            ...

    `name` may name a table inside the processor's (`"mine.columns.id"`: the keys of the
    `[processor.mine.columns.id]` table). `true` is not taken for an integer (Python's bool is
    an int) unless bool is allowed; a list is accepted as a list or a tuple (a frozen array)."""
    typed: dict[str, Any] = {}
    for key, value in options.items():
        where = f"processor.{name}.{key}"
        if key not in allowed:
            hint = _suggest(key, list(allowed), f"processor.{name}.")
            problems.append(f"{where}: unknown key{hint}")
            continue
        types = allowed[key]
        named = types if isinstance(types, tuple) else (types,)
        ok = isinstance(value, (*named, tuple) if list in named else named)
        if not ok or (isinstance(value, bool) and bool not in named):
            problems.append(f"{where}: expected {expected(types)}, got {described(key, value)}")
            continue
        typed[key] = value
    return typed


_NO_VALUE: Any = object()


def option_problem(name: str, key: str, why: str, value: Any = _NO_VALUE) -> str:
    """One line of a `ConfigError` about the key `key` of `[processor.<name>]` (a dotted `key`
    names a key of a table inside it, `columns.id.type`): `processor.<name>.<key>: <why>`,
    then, if `value` is given, `, got <value>` with the value in the words of a config file,
    as `check_options` quotes it (`got a string '10s'`, `got an integer -1`, `got true`; the
    value left out under a key named like a secret, URL passwords masked):

        option_problem("mine", "max_rows", "must be >= 1", 0)
        # 'processor.mine.max_rows: must be >= 1, got an integer 0'
    """
    line = f"processor.{name}.{key}: {why}"
    if value is _NO_VALUE:
        return line
    return f"{line}, got {described(key, value)}"
