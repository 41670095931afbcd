"""Checking a processor's own `[processor.<name>]` table: unknown keys and wrong types are
refused with a message that names the key.

The daemon's config freezes a processor's table (loghubd/config/sections.py): a TOML array
arrives as a tuple and a table as a read-only mapping. So `list` here accepts a tuple too, and
a table is checked as `Mapping`, whether the options came from a file or from Python."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Types = type | tuple[type, ...]


def check_options(name: str, options: Mapping[str, Any], allowed: Mapping[str, Types]) -> None:
    """Refuse unknown keys and wrong types in a processor's own table, naming the key."""
    for key, value in options.items():
        if key not in allowed:
            raise ValueError(f"processor.{name}.{key}: unknown key")
        types = allowed[key]
        named = types if isinstance(types, tuple) else (types,)
        if not isinstance(value, (*named, tuple) if list in named else named):
            expected = " or ".join(t.__name__ for t in named)
            raise ValueError(
                f"processor.{name}.{key}: expected {expected}, got {type(value).__name__}"
            )
