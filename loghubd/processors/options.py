"""Checking a processor's own `[processor.<name>]` table: unknown keys and wrong types are
refused with a message that names the key."""

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
        if not isinstance(value, types):
            expected = " or ".join(
                t.__name__ for t in (types if isinstance(types, tuple) else (types,))
            )
            raise ValueError(
                f"processor.{name}.{key}: expected {expected}, got {type(value).__name__}"
            )
