"""`check_options`, table-driven: a processor's own table as it arrives from the daemon's
config (arrays frozen into tuples, tables into read-only mappings) or from Python."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import pytest

from loghubd.processors.options import Types, check_options

ALLOWED: dict[str, Types] = {
    "path": str,
    "fields": list,
    "statistics": (str, list),
    "headers": Mapping,  # a file gives a read-only mapping
    "size": int,
    "ratio": (int, float),
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
    ],
)
def test_accepted(options: dict[str, Any]) -> None:
    check_options("p", options, ALLOWED)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"nope": 1}, "processor.p.nope: unknown key"),
        ({"fields": "a"}, "processor.p.fields: expected list, got str"),
        ({"statistics": 3}, "processor.p.statistics: expected str or list, got int"),
        ({"size": "3"}, "processor.p.size: expected int, got str"),
        ({"ratio": "x"}, "processor.p.ratio: expected int or float, got str"),
        ({"path": ("a",)}, "processor.p.path: expected str, got tuple"),
    ],
)
def test_refused_naming_the_key(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=r"^processor\.p\.") as info:
        check_options("p", options, ALLOWED)
    assert str(info.value) == message
