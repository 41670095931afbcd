"""The daemons' config files: `dump_toml` (the small TOML writer the tests need) and
`source_entry` (one `[[sources]]` entry).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tests.integration.harness_sls import PROJECT


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML for {value!r}")


def _dump_table(lines: list[str], header: str, table: Mapping[str, Any], array: bool) -> None:
    lines.append(f"[[{header}]]" if array else f"[{header}]")
    subs = {k: v for k, v in table.items() if isinstance(v, Mapping)}
    lines += [f"{k} = {_toml_value(v)}" for k, v in table.items() if k not in subs]
    for name, sub in subs.items():
        _dump_table(lines, f"{header}.{name}", sub, False)


def dump_toml(doc: Mapping[str, Mapping[str, Any] | list[Mapping[str, Any]]]) -> str:
    """Sections of scalars and nested sub-tables (`[processor.jsonl]`); a list of tables is
    an array of tables (`[[sources]]`, with `[sources.consumer]` etc. after each entry)."""
    lines: list[str] = []
    for section, table in doc.items():
        if isinstance(table, list):
            for entry in table:
                _dump_table(lines, section, entry, True)
        else:
            _dump_table(lines, section, table, False)
    return "\n".join(lines) + "\n"


def source_entry(
    name: str,
    endpoint: str,
    logstore: str,
    *,
    project: str = PROJECT,
    consumer: Mapping[str, Any] | None = None,
    processor: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One `[[sources]]` entry for `Daemon(sources=...)`: `consumer` keys go to its
    `[sources.consumer]`, `processor` (e.g. `{"name": "jsonl", "jsonl": {"path": ...}}`) to
    its `[sources.processor]`; without one, the daemon writes jsonl to `out-<name>`."""
    entry: dict[str, Any] = {
        "name": name,
        "endpoint": endpoint,
        "project": project,
        "logstore": logstore,
    }
    if consumer:
        entry["consumer"] = dict(consumer)
    if processor is not None:
        entry["processor"] = dict(processor)
    return entry
