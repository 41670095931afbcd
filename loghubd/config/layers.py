"""Layering: the TOML file, then `LOGHUBD_*` env vars, then overrides, merged key by key into
raw values (`_Value`: the value, where it came from, whether it is text to parse).

`_Layers` knows the shape of the file (sections, `[processor.<name>]` option tables,
`[[sources]]` entries and their `[sources.consumer]` / `[sources.processor]` tables) and how
env var names and dotted override keys map onto it; unknown sections and malformed paths
become problems here. Keys inside a section are checked later, against the section's fields.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any

from loghubd.config.redact import described
from loghubd.config.sections import (
    _SECTIONS,
    _SOURCE_NAME,
    DEFAULT_PROCESSOR,
    ProcessorConfig,
    ProcessorRef,
)
from loghubd.config.values import _guess, _suggest, _Value

ENV_PREFIX = "LOGHUBD_"


def _env_name(source: str) -> str:
    """How a source's name appears in env var names: `my-app` → `my_app` (then upper case)."""
    return source.lower().replace("-", "_")


def source_env_prefix(source: str) -> str:
    """The env vars of `[[sources]]` entry `source`: `my-app` → `LOGHUBD_SOURCES_MY_APP`
    (then `__<KEY>`)."""
    return f"{ENV_PREFIX}SOURCES_{_env_name(source).upper()}"


class _Tables:
    """The raw core values and processor option tables of one scope (the top level, or one
    `[[sources]]` entry), merged over the layers."""

    def __init__(self) -> None:
        self.core: dict[str, dict[str, _Value]] = {}
        self.options: dict[str, Any] = {}  # processor name → its (nested) table
        self.origins: dict[str, str] = {}  # processor name → where its table was first given


class _Layers:
    """The raw values of all layers, merged: later layers replace earlier values key by key."""

    def __init__(self) -> None:
        self.top = _Tables()
        # `[[sources]]` entries in file order, by their env name: (name, tables).
        self.sources: dict[str, tuple[str, _Tables]] = {}
        self.multi = False  # the file has `[[sources]]`
        self.problems: list[str] = []
        self.warnings: list[str] = []  # deprecated keys: accepted, but should be changed

    def set(self, path: Sequence[str], value: Any, origin: str, textual: bool) -> None:
        section, key = path[0], ".".join(path)
        if section == "sources" and len(path) >= 3:
            self._set_source(path[1], path[2:], value, origin, textual)
        elif section == "sources":
            self.problems.append(f"{key}: expected sources.<name>.<key> [{origin}]")
        elif section not in _SECTIONS:
            known = [*_SECTIONS, "sources"]
            self.problems.append(
                f"{key}: unknown section {section!r}{_suggest(section, known)} [{origin}]"
            )
        else:
            self._put(self.top, section, path[1:], value, origin, textual, section)

    def _set_source(
        self, name: str, path: Sequence[str], value: Any, origin: str, textual: bool
    ) -> None:
        found = self.sources.get(_env_name(name))
        if found is None:
            names = [n for n, _t in self.sources.values()]
            self.problems.append(
                f"sources.{name}: no [[sources]] entry is named {name!r}"
                f"{_suggest(name, names, 'sources.')} [{origin}]"
            )
            return
        name, tables = found
        if path[0] in ("consumer", "processor"):
            section, rest = path[0], path[1:]
            label = f"sources.{name}.{section}"
        else:
            section, rest, label = "source", path, f"sources.{name}"
        if not rest:
            self.problems.append(f"{label}: expected a key [{origin}]")
            return
        self._put(tables, section, rest, value, origin, textual, label)

    def _put(
        self,
        tables: _Tables,
        section: str,
        rest: Sequence[str],
        value: Any,
        origin: str,
        textual: bool,
        label: str,
    ) -> None:
        if section == "processor" and len(rest) >= 2:
            self._set_option(tables, rest, value, origin, textual, label)
        elif len(rest) != 1:
            self.problems.append(f"{label}.{'.'.join(rest)}: unknown key [{origin}]")
        else:
            tables.core.setdefault(section, {})[rest[0]] = _Value(value, origin, textual)

    def _set_option(
        self,
        tables: _Tables,
        path: Sequence[str],
        value: Any,
        origin: str,
        textual: bool,
        label: str,
    ) -> None:
        tables.origins.setdefault(path[0], origin)
        table = tables.options
        for part in path[:-1]:
            table = table.setdefault(part, {})
            if not isinstance(table, dict):
                self.problems.append(
                    f"{label}.{'.'.join(path)}: {part!r} is not a table [{origin}]"
                )
                return
        if textual and not isinstance(table.get(path[-1]), str):
            value = _guess(value)
        table[path[-1]] = value

    def add_toml(self, data: Mapping[str, Any], origin: str) -> None:
        for section, table in data.items():
            if section == "sources":
                self._add_sources(table, origin)
                continue
            if section not in _SECTIONS:
                known = [*_SECTIONS, "sources"]
                self.problems.append(
                    f"{section}: unknown section{_suggest(section, known)} [{origin}]"
                )
                continue
            if not isinstance(table, dict):
                self.problems.append(f"{section}: expected a table [{section}] [{origin}]")
                continue
            self._add_table(self.top, section, table, origin, section)

    def _add_table(
        self, tables: _Tables, section: str, table: Mapping[str, Any], origin: str, label: str
    ) -> None:
        for key, value in table.items():
            is_table = section == "processor" and isinstance(value, dict)
            if is_table and key not in _field_names(ProcessorConfig):
                for name, option in value.items():
                    self._put(tables, section, [key, name], option, origin, False, label)
                tables.options.setdefault(key, {})  # keep empty tables too
                tables.origins.setdefault(key, origin)
            else:
                self._put(tables, section, [key], value, origin, False, label)

    def _add_sources(self, entries: Any, origin: str) -> None:
        self.multi = True
        if not isinstance(entries, list) or not entries:
            self.problems.append(f"sources: expected one or more [[sources]] tables [{origin}]")
            return
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict):
                self.problems.append(f"sources[{i}]: expected a [[sources]] table [{origin}]")
                continue
            name = entry.get("name")
            if not isinstance(name, str) or not _SOURCE_NAME.fullmatch(name):
                self.problems.append(
                    f"sources[{i}].name: required, letters, digits, _ and - (it names the "
                    f"source in metrics, logs and env vars), got {name!r} [{origin}]"
                )
                continue
            if _env_name(name) in self.sources:
                self.problems.append(
                    f"sources.{name}: a source of that name (or env name "
                    f"{ENV_PREFIX}SOURCES_{_env_name(name).upper()}) is already defined [{origin}]"
                )
                continue
            tables = _Tables()
            self.sources[_env_name(name)] = (name, tables)
            for key, value in entry.items():
                if key == "name":
                    continue
                if key in ("consumer", "processor"):
                    label = f"sources.{name}.{key}"
                    if isinstance(value, dict):
                        self._add_table(tables, key, value, origin, label)
                    else:
                        self.problems.append(f"{label}: expected a table [{origin}]")
                else:
                    self._put(tables, "source", [key], value, origin, False, f"sources.{name}")

    def processor_refs(self) -> tuple[ProcessorRef, ...]:
        """Where the layers name processors, keyed as messages name them: the `name` of
        `[processor]` (given, or the default of the single form), each `[[sources]]` entry's
        (its own, else the shared one), then every option table."""
        shared = self.top.core.get("processor", {}).get("name")
        # A shared name every entry overrides chooses nothing, but a typo there is one still.
        refs = [_chosen("processor.name", shared)] if shared or not self.multi else []
        for name, tables in self.sources.values():
            own = tables.core.get("processor", {}).get("name")
            key = f"sources.{name}.processor.name" if own else "processor.name"
            refs.append(_chosen(key, own or shared))
        for where, tables in self._processor_scopes():
            refs.extend(ProcessorRef(f"{where}.{n}", n, o) for n, o in tables.origins.items())
        return tuple(dict.fromkeys(refs))

    def take_misplaced_tables(self) -> None:
        """`[processor]` keys naming a processor the configuration uses (chooses, or gives a
        table for) that hold a value instead of its table (`jsonl = "/var/log/app"`): refused
        as such rather than as unknown keys, and taken out of the section's keys."""
        known = {ref.name for ref in self.processor_refs()} - set(_field_names(ProcessorConfig))
        for where, tables in self._processor_scopes():
            values = tables.core.get("processor", {})
            for key in [key for key in values if key in known]:
                value, origin, _textual = values.pop(key)
                self.problems.append(
                    f"{where}.{key}: expected a table of the {key} processor's options, "
                    f"got {described(key, value)} [{origin}]"
                )

    def _processor_scopes(self) -> list[tuple[str, _Tables]]:
        """Each scope with `[processor]` keys and tables, and the key its tables are under."""
        entries = [(f"sources.{name}.processor", t) for name, t in self.sources.values()]
        return [("processor", self.top), *entries]

    def add_env(self, environ: Mapping[str, str]) -> None:
        for var, text in sorted(environ.items()):
            if not var.startswith(ENV_PREFIX) or "__" not in var:
                continue
            head, *rest = var[len(ENV_PREFIX) :].lower().split("__")
            if head.startswith("sources_") and head != "sources_":
                self.set(["sources", head.removeprefix("sources_"), *rest], text, var, True)
                continue
            if head.startswith("processor_") and head != "processor_":
                head, rest = "processor", [head.removeprefix("processor_"), *rest]
            self.set([head, *rest], text, var, True)

    def add_overrides(self, overrides: Mapping[str, Any], prefix: str = "") -> None:
        for key, value in overrides.items():
            if isinstance(value, Mapping):
                self.add_overrides(value, f"{prefix}{key}.")
            elif value is not None:  # None: an unset CLI flag
                self.set(f"{prefix}{key}".split("."), value, "override", isinstance(value, str))


def _chosen(key: str, given: _Value | None) -> ProcessorRef:
    if given is None:
        return ProcessorRef(key, DEFAULT_PROCESSOR, "")
    return ProcessorRef(key, str(given.value), given.origin)


def _field_names(cls: type[Any]) -> list[str]:
    return [f.name for f in fields(cls) if f.name != "options"]
