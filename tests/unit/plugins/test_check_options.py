"""`check_options`, table-driven: a processor's own table as it arrives from the daemon's
config (arrays frozen into tuples, tables into read-only mappings) or from Python."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import pytest

from loghubd.config import ConfigError
from loghubd.processors.options import Types, check_options

ALLOWED: dict[str, Types] = {
    "path": str,
    "fields": list,
    "statistics": (str, list),
    "headers": Mapping,  # a file gives a read-only mapping
    "size": int,
    "ratio": (int, float),
    "gzip": bool,
    "api_token": str,
}


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"path": "/x", "size": 3, "ratio": 0.5},
        {"fields": ["a", "b"]},  # from Python
        {"fields": ("a", "b")},  # from a config file: a TOML array, frozen
        {"statistics": "time"},
        {"statistics": ("id",)},
        {"headers": MappingProxyType({"a": "b"})},
        {"gzip": False},
    ],
)
def test_accepted(options: dict[str, Any]) -> None:
    check_options("p", options, ALLOWED)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"nope": 1}, "processor.p.nope: unknown key"),
        ({"sise": 1}, "processor.p.sise: unknown key (did you mean processor.p.size?)"),
        ({"fields": "a"}, "processor.p.fields: expected a list, got a string 'a'"),
        (
            {"statistics": 3},
            "processor.p.statistics: expected a string or a list, got an integer 3",
        ),
        ({"size": "3"}, "processor.p.size: expected an integer, got a string '3'"),
        ({"size": 2.5}, "processor.p.size: expected an integer, got a number 2.5"),
        ({"size": True}, "processor.p.size: expected an integer, got true"),  # bool is an int
        ({"ratio": "x"}, "processor.p.ratio: expected a number, got a string 'x'"),
        ({"ratio": False}, "processor.p.ratio: expected a number, got false"),
        ({"path": ("a",)}, "processor.p.path: expected a string, got a list ['a']"),
        (
            {"path": MappingProxyType({"a": 1})},
            "processor.p.path: expected a string, got a table {'a': 1}",
        ),
        ({"headers": "X-A: b"}, "processor.p.headers: expected a table, got a string 'X-A: b'"),
        ({"gzip": "yes"}, "processor.p.gzip: expected true or false, got a string 'yes'"),
        (  # a long value is cut short
            {"size": "x" * 100},
            f"processor.p.size: expected an integer, got a string '{'x' * 56}...",
        ),
    ],
)
def test_refused_naming_the_key_and_the_value(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=r"^processor\.p\.") as info:
        check_options("p", options, ALLOWED)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"api_token": 123456}, "processor.p.api_token: expected a string, got an integer"),
        (  # a header line where the table of headers goes
            {"headers": "Authorization: Bearer s3cr3t"},
            "processor.p.headers: expected a table, got a string",
        ),
        (
            {"path": ["s3://KEY:s3cr3t@bucket/logs"]},
            "processor.p.path: expected a string, got a list ['s3://KEY:***@bucket/logs']",
        ),
    ],
)
def test_a_secret_is_never_quoted(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=r"^processor\.p\.") as info:
        check_options("p", options, ALLOWED)
    assert str(info.value) == message
    assert "s3cr3t" not in message and "123456" not in message


def test_every_bad_key_of_the_table_at_once() -> None:
    options = {"path": "/x", "size": "3", "colour": "red", "ratio": "x", "gzip": True}
    with pytest.raises(ConfigError) as info:
        check_options("p", options, ALLOWED)
    assert info.value.problems == (
        "processor.p.size: expected an integer, got a string '3'",
        "processor.p.colour: unknown key",
        "processor.p.ratio: expected a number, got a string 'x'",
    )
