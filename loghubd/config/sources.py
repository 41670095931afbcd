"""Sources: the merged layers → one `SourceSpec` per consumed logstore.

The single form (`[source]`, `[consumer]`, `[processor]`) gives one source named "default";
`[[sources]]` gives one per entry, each entry's own keys over the shared `[consumer]` /
`[processor]` tables (option tables merged key by key). Also here: derived defaults (computed
per source), `credentials = "env"` (the keys read from the loader's environ), the names keys
carry in messages (the shared table's or the entry's), and the checks across entries (one
consumer per group).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from loghubd.config.layers import ENV_PREFIX, _Layers, source_env_prefix
from loghubd.config.sections import (
    _DEFAULT_HEARTBEAT,
    _PER_SOURCE,
    _SECTIONS,
    ENV_CREDENTIALS,
    SourceSpec,
)
from loghubd.config.values import _construct, _raise_if, _section_kwargs, _Value
from loghubd.sls.endpoint import service_key


def _derive(consumer: dict[str, Any], warnings: list[str], label: Callable[[str], str]) -> None:
    """Derived defaults: only when the key was not given, so an explicit value is validated.
    Deprecated keys set their replacements (unless those are given too) and add a warning."""
    heartbeat = consumer.get("heartbeat_interval", _DEFAULT_HEARTBEAT)
    consumer.setdefault("timeout", 3 * heartbeat)
    consumer.setdefault("request_timeout", min(10.0, consumer["timeout"] / 3))
    for old, new in _DEPRECATED.items():
        if old in consumer:
            for key in new:
                consumer.setdefault(key, consumer[old])
            where = label(old).removesuffix(old)  # the table the old key was given in
            warnings.append(
                f"{where}{old} is deprecated: it sets "
                f"{' and '.join(where + key for key in new)}, give those instead"
            )


# consumer key → the keys it stands for now (docs/retries.md, "`retry_max_backoff` (deprecated)").
_DEPRECATED = {"retry_max_backoff": ("pull_retry_max_backoff", "processor_retry_max_backoff")}


def _merged(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Nested tables merged key by key; `over` wins."""
    out = dict(base)
    for key, value in over.items():
        old = out.get(key)
        both = isinstance(value, Mapping) and isinstance(old, Mapping)
        out[key] = _merged(old, value) if both else value  # type: ignore[arg-type]
    return out


def _env_keys(
    source: dict[str, Any],
    environ: Mapping[str, str],
    problems: list[str],
    label: Callable[[str], str],
) -> None:
    """`credentials = "env"`: the keys come from the Alibaba Cloud SDKs' variables, so keys
    given in the file (or `LOGHUBD_*`, or overrides) are refused rather than silently lost.
    Missing variables are reported by `SourceConfig` itself."""
    if source.get("credentials") != "env":
        return
    keys = ("access_key_id", "access_key_secret", "security_token")
    for key in keys:
        if key in source:
            problems.append(
                f'{label(key)}: not allowed when {label("credentials")} is "env" (the keys '
                f"come from {', '.join(ENV_CREDENTIALS)})"
            )
    for key, var in zip(keys, ENV_CREDENTIALS, strict=True):
        if environ.get(var):
            source[key] = environ[var]


def _top_label(section: str) -> Callable[[str], str]:
    return lambda key: f"{section}.{key}"


def _top_hint(section: str) -> Callable[[str], str]:
    return lambda key: f"set it in [{section}] or {ENV_PREFIX}{section.upper()}__{key.upper()}"


def _build_single(layers: _Layers, environ: Mapping[str, str]) -> tuple[SourceSpec, ...]:
    top, problems = layers.top, layers.problems
    kwargs = {
        name: _section_kwargs(
            _SECTIONS[name], top.core.get(name, {}), problems, _top_label(name), _top_hint(name)
        )
        for name in _PER_SOURCE
    }
    _derive(kwargs["consumer"], layers.warnings, _top_label("consumer"))
    _env_keys(kwargs["source"], environ, problems, _top_label("source"))
    kwargs["processor"]["options"] = top.options
    _raise_if(problems)
    sections = {name: _construct(_SECTIONS[name], kwargs[name], problems, name) for name in kwargs}
    if any(section is None for section in sections.values()):
        return ()
    return (SourceSpec("default", **sections),)


def _source_label(
    name: str, section: str, mine: Mapping[str, _Value], shared: Mapping[str, _Value]
) -> Callable[[str], str]:
    """A key's name in messages: the shared table's (`consumer.timeout`) when the value came
    from there, else the entry's own (`sources.app.consumer.group`)."""
    if section == "source":
        return lambda key: f"sources.{name}.{key}"
    return lambda key: (
        f"{section}.{key}"
        if key in shared and key not in mine
        else f"sources.{name}.{section}.{key}"
    )


def _source_hint(name: str, section: str) -> Callable[[str], str]:
    if section == "source":
        env = source_env_prefix(name)
        return lambda key: f"set it in the [[sources]] entry named {name!r} or {env}__{key.upper()}"
    return lambda key: f"set it in [{section}] or in this entry's [sources.{section}]"


def _build_multi(layers: _Layers, environ: Mapping[str, str]) -> tuple[SourceSpec, ...]:
    """`[[sources]]`: each entry's own keys over the shared `[consumer]` / `[processor]`."""
    top, problems = layers.top, layers.problems
    for key, (_v, origin, _t) in top.core.get("source", {}).items():
        problems.append(
            f"source.{key}: [source] cannot be combined with [[sources]]; give each "
            f"[[sources]] entry its own {key} (env: {ENV_PREFIX}SOURCES_<NAME>__{key.upper()}) "
            f"[{origin}]"
        )
    staged: list[tuple[str, dict[str, dict[str, Any]]]] = []
    for name, tables in layers.sources.values():
        own = tables.core
        if "name" in own.get("consumer", {}):
            problems.append(
                f"sources.{name}.consumer.name: the consumer name is the daemon's, the same in "
                f"every group: set it in [consumer] (or with --name) "
                f"[{own['consumer']['name'].origin}]"
            )
        kwargs: dict[str, dict[str, Any]] = {}
        for section in _PER_SOURCE:
            mine = own.get(section, {})
            shared = {} if section == "source" else top.core.get(section, {})
            given = {**shared, **mine}
            kwargs[section] = _section_kwargs(
                _SECTIONS[section],
                given,
                problems,
                _source_label(name, section, mine, shared),
                _source_hint(name, section),
            )
        _derive(
            kwargs["consumer"],
            layers.warnings,
            _source_label(name, "consumer", own.get("consumer", {}), top.core.get("consumer", {})),
        )
        _env_keys(kwargs["source"], environ, problems, _source_label(name, "source", {}, {}))
        kwargs["processor"]["options"] = _merged(top.options, tables.options)
        staged.append((name, kwargs))
    # A problem of a shared [consumer] key shows once, not once per source.
    problems[:] = list(dict.fromkeys(problems))
    _raise_if(problems)
    specs: list[SourceSpec] = []
    for name, kwargs in staged:
        sections = {
            section: _construct(
                _SECTIONS[section],
                kwargs[section],
                problems,
                f"sources.{name}" if section == "source" else f"sources.{name}.{section}",
            )
            for section in _PER_SOURCE
        }
        if all(section is not None for section in sections.values()):
            specs.append(SourceSpec(name, **sections))
    problems.extend(_shared_groups(specs))
    problems.extend(_shared_jsonl_paths(specs))
    return tuple(specs)


def _shared_groups(specs: list[SourceSpec]) -> list[str]:
    """Two entries consuming one logstore with one group, however the endpoint is spelt
    (`http://localhost:7100` and `http://127.0.0.1:7100/`): both would hold every shard, each
    heartbeat letting go of what the other holds, and every log would be delivered twice."""

    def where(spec: SourceSpec) -> object:
        s = spec.source
        return (service_key(s.endpoint), s.project, s.logstore, spec.consumer.group)

    def problem(spec: SourceSpec, first: str) -> str:
        s = spec.source
        return (
            f"sources.{spec.name}: consumes {s.project}/{s.logstore} with group "
            f"{spec.consumer.group!r}, like sources.{first}: one consumer per group"
        )

    return _clashes(specs, where, problem)


def _shared_jsonl_paths(specs: list[SourceSpec]) -> list[str]:
    """Two entries writing `jsonl` into one directory would write one `shard-<n>.jsonl` file
    each for their shard n: one's rotation or retry would cut the other's lines."""

    def where(spec: SourceSpec) -> object:
        path = spec.processor.selected_options.get("path")
        if spec.processor.name != "jsonl" or not isinstance(path, str) or not path:
            return None
        return os.path.realpath(path)

    def problem(spec: SourceSpec, first: str) -> str:
        return (
            f"sources.{spec.name}.processor.jsonl.path: {where(spec)} is also where "
            f"sources.{first} writes; give each source its own directory"
        )

    return _clashes(specs, where, problem)


def _clashes(
    specs: list[SourceSpec],
    where: Callable[[SourceSpec], object],
    problem: Callable[[SourceSpec, str], str],
) -> list[str]:
    """`problem(spec, first)` for each entry whose `where` (not None) an earlier one has."""
    problems: list[str] = []
    seen: dict[object, str] = {}
    for spec in specs:
        key = where(spec)
        if key is None:
            continue
        if key in seen:
            problems.append(problem(spec, seen[key]))
        seen.setdefault(key, spec.name)
    return problems
