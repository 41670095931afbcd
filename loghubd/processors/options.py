"""Checking a processor's own `[processor.<name>]` table: unknown keys and wrong types are
refused, every one of the table at once, each message naming the key and quoting the value
in the words of a config file (`expected a number, got a string '60s'`).

The daemon's config freezes a processor's table (loghubd/config/sections.py): a TOML array
arrives as a tuple and a table as a read-only mapping. So `list` here accepts a tuple too, and
a table is checked as `Mapping`, whether the options came from a file or from Python."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loghubd.config.redact import described
from loghubd.config.values import ConfigError, _suggest

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
    problems = []
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
    if problems:
        raise ConfigError(problems)
