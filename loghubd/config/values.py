"""Typed values: the text and TOML values of the layers → the types of the section fields.

Parsers of the values with a syntax of their own (`consumer.start` / `end` times, `consumer.shards`
lists), `_coerce` for the plain field types (str, bool, int, float, Literal, tuple[str, ...]),
`_section_kwargs` turning one section's raw values into typed keyword arguments, and the error
types: `_Invalid` (one value, no key yet) and `ConfigError` (every problem, each naming its key).
Imports nothing from the other config modules but `redact` (how a message quotes a value).
"""

from __future__ import annotations

import contextlib
import difflib
import math
import re
import tomllib
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import MISSING, fields
from datetime import date, datetime
from typing import Any, Literal, NamedTuple

from loghubd.config.redact import described

_TRUE, _FALSE = frozenset({"true", "1", "yes"}), frozenset({"false", "0", "no"})


class ConfigError(ValueError):
    """The configuration is invalid; `problems` has one line per problem, each naming its key."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(self.problems))


class _Invalid(Exception):
    """A value does not fit its field; the caller adds the key and where the value came from."""


def _validate(section: str, checks: Iterable[tuple[bool, str, str]]) -> None:
    """Raise one ConfigError for every failed (ok, key, message) check of `section`."""
    _raise_if([f"{section}.{key}: {message}" for ok, key, message in checks if not ok])


def _raise_if(problems: list[str]) -> None:
    if problems:
        raise ConfigError(problems)


def _parse_start(value: object) -> str | float:
    """`consumer.start`: "begin", "end", unix seconds, or an ISO-8601 timestamp with a zone."""
    if isinstance(value, str):
        text = value.strip()
        if text in ("begin", "end"):
            return text
        try:
            return _seconds(float(text))
        except ValueError:
            pass
        try:
            value = datetime.fromisoformat(text)
        except ValueError:
            raise _Invalid(
                "expected 'begin', 'end', unix seconds or an ISO-8601 timestamp with a time zone"
                " (e.g. 2024-05-01T00:00:00+08:00)"
            ) from None
    if isinstance(value, datetime):
        # A timestamp without a zone would silently start hours early or late on some hosts.
        if value.tzinfo is None:
            raise _Invalid("the timestamp needs a time zone (e.g. Z or +08:00)")
        return value.timestamp()
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _seconds(float(value))
    if isinstance(value, date):
        raise _Invalid("a date needs a time and a time zone")
    raise _Invalid("expected 'begin', 'end', unix seconds or an ISO-8601 timestamp")


def _parse_end(value: object) -> float | None:
    """`consumer.end`: unix seconds or an ISO-8601 timestamp with a zone ("" = not bounded)."""
    if isinstance(value, str) and value.strip() in ("begin", "end"):
        raise _Invalid("expected unix seconds or an ISO-8601 timestamp with a time zone")
    if isinstance(value, str) and not value.strip():
        return None
    parsed = _parse_start(value)
    assert not isinstance(parsed, str)
    return parsed


def _parse_seconds(value: object) -> float:
    """A duration in seconds, for a field whose default is None (None: not given)."""
    return float(_coerce(float, value, isinstance(value, str)))


def _parse_shards(value: object) -> tuple[int, ...] | None:
    """`consumer.shards`: a list of shard ids, or a string of ids and inclusive ranges such
    as "0-3,8" ("" = every shard)."""
    ids: list[int] = []
    if isinstance(value, str):
        if not value.strip():
            return None
        for part in value.split(","):
            low, dash, high = part.strip().partition("-")
            try:
                first, last = int(low), int(high if dash else low)
            except ValueError:
                raise _Invalid(
                    'expected shard ids and ranges such as "0-3,8", or a list of shard ids'
                ) from None
            if first < 0 or last < first:
                raise _Invalid(f"bad range {part.strip()!r}: expected low-high with low <= high")
            ids.extend(range(first, last + 1))
    elif isinstance(value, list | tuple):
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise _Invalid("expected a list of shard ids (integers)")
        ids = list(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        ids = [value]
    else:
        raise _Invalid('expected a list of shard ids or a string such as "0-3,8"')
    if not ids:
        raise _Invalid("must name at least one shard (leave it out to take every shard)")
    if any(i < 0 for i in ids):
        raise _Invalid("shard ids are >= 0")
    return tuple(sorted(set(ids)))


def _seconds(value: float) -> float:
    if not math.isfinite(value) or value < 0:
        raise _Invalid("unix seconds must be a finite number >= 0")
    if value >= 1e11:  # year 5138: surely milliseconds, which SLS APIs also use elsewhere
        raise _Invalid("looks like milliseconds; give unix seconds")
    return value


class _Value(NamedTuple):
    value: Any
    origin: str  # where it came from, for error messages
    textual: bool  # a string to parse (env var, CLI), not a typed TOML value


def _suggest(word: str, candidates: Sequence[str], prefix: str = "") -> str:
    close = difflib.get_close_matches(word, candidates, n=1)
    return f" (did you mean {prefix}{close[0]}?)" if close else ""


def _coerce(hint: Any, value: Any, textual: bool) -> Any:
    """Convert one value to the field type `hint`; raises _Invalid with what was expected."""
    if typing.get_origin(hint) is Literal:
        choices = typing.get_args(hint)
        if value not in choices:
            raise _Invalid(f"expected one of {', '.join(map(repr, choices))}")
        return value
    if hint is str:
        if not isinstance(value, str):
            raise _Invalid("expected a string")
        return value
    if hint is bool:
        if textual and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        if not isinstance(value, bool):
            raise _Invalid("expected a boolean (true/false/1/0/yes/no)")
        return value
    if hint is int:
        with contextlib.suppress(ValueError):  # left as text: refused just below
            value = int(value.strip()) if textual else value
        if not isinstance(value, int) or isinstance(value, bool):
            raise _Invalid("expected an integer")
        return value
    if hint is float:
        with contextlib.suppress(ValueError):
            value = float(value) if textual else value
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise _Invalid("expected a number (seconds for durations)")
        if not math.isfinite(value):
            raise _Invalid("expected a finite number")
        return float(value)
    if typing.get_origin(hint) is tuple:  # tuple[str, ...]
        if textual:
            text = value.strip()
            value = (
                _toml_value(text)
                if text.startswith("[")
                else [part.strip() for part in text.split(",") if part.strip()]
            )
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise _Invalid("expected a list of strings")
        return tuple(value)
    raise TypeError(f"no conversion for {hint!r}")  # a new field type needs a branch here


def _toml_value(text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return None


def _guess(text: str) -> Any:
    """A plugin option from an env var: a TOML literal if it is one, else the text itself."""
    value = _toml_value(text)
    scalar = isinstance(value, bool | int | str | list) or (
        isinstance(value, float) and math.isfinite(value)
    )
    return value if scalar else text


def _section_kwargs(
    cls: type[Any],
    given: Mapping[str, _Value],
    problems: list[str],
    label: Callable[[str], str],
    missing_hint: Callable[[str], str],
) -> dict[str, Any]:
    """Typed keyword arguments for the section class `cls` from the raw `given` values; type
    problems go to `problems`, each key named by `label(key)`."""
    hints = typing.get_type_hints(cls)
    by_name = {f.name: f for f in fields(cls) if f.name != "options"}
    kwargs: dict[str, Any] = {}
    for key, (value, origin, textual) in given.items():
        f = by_name.get(key)
        if f is None:
            prefix = label(key).removesuffix(key)
            problems.append(
                f"{label(key)}: unknown key{_suggest(key, list(by_name), prefix)} [{origin}]"
            )
            continue
        parse: Callable[[Any], Any] | None = f.metadata.get("parse")
        try:
            kwargs[key] = parse(value) if parse else _coerce(hints[key], value, textual)
        except _Invalid as exc:
            # Never echo a secret, not even a mistyped one.
            got = "" if f.metadata.get("secret") else f", got {described(key, value)}"
            problems.append(f"{label(key)}: {exc}{got} [{origin}]")
    for f in by_name.values():
        if f.default is MISSING and f.default_factory is MISSING and f.name not in given:
            problems.append(f"{label(f.name)}: required key is missing ({missing_hint(f.name)})")
    return kwargs


def _construct(cls: type[Any], kwargs: dict[str, Any], problems: list[str], rename: str) -> Any:
    """`cls(**kwargs)`, its range problems added to `problems` with the section's name
    replaced by `rename` (e.g. `consumer.timeout` → `sources.app.consumer.timeout`)."""
    try:
        return cls(**kwargs)
    except ConfigError as exc:  # range checks: gather every section's before raising
        for problem in exc.problems:
            section, dot, rest = problem.partition(".")
            if dot and rename != section:
                # the keys the message names too (`... when source.access_key_id is set`)
                rest = re.sub(rf"(?<![\w.]){re.escape(section)}\.", f"{rename}.", rest)
                problem = f"{rename}.{rest}"
            problems.append(problem)
    return None
