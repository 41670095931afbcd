"""Configuration: TOML file, then `LOGHUBD_<SECTION>__<KEY>` env vars, then overrides → Config.

The only package that reads the config file, looks at the environment's config variables, or
handles config dicts; everything else receives the frozen dataclasses of `sections` (the
processor plugin gets its own table, `ProcessorConfig.selected_options`, and validates it
itself). This module is the public face (`load`, `loads` and the re-exported names); the work
is done by:

- `values`: typed values: parsing and coercion, `ConfigError`;
- `sections`: the section dataclasses and their range checks, `Config.redacted`;
- `layers`: TOML, env vars and overrides merged into raw values;
- `sources`: raw values → one `SourceSpec` per source (`[source]` or `[[sources]]`).

Rules:
- Unknown sections and keys are refused, naming the full key and the closest known one.
- Text values (env vars, string overrides) are parsed to the field's type: int, float, bool
  (true/false/1/0/yes/no), str, lists (comma-separated or a TOML array). TOML values must
  already have the right type (an integer is accepted for a float).
- Every problem names its key (`consumer.timeout`); type problems are collected over the whole
  file before any range check runs, so one `loghubd check-config` run shows them together.
- Durations are float seconds. Attribute names equal the TOML keys, which are stable: docs,
  tests and ops tooling depend on them (hence `heartbeat_interval`, not `heartbeat_interval_s`).
- Env var names are the key path upper-cased, with `__` after the section:
  `LOGHUBD_CONSUMER__GROUP`. A processor's table `[processor.jsonl]` is
  `LOGHUBD_PROCESSOR_JSONL__<KEY>` (or `LOGHUBD_PROCESSOR__JSONL__<KEY>`); its values are
  TOML literals when they parse as one (`true`, `3`, `[1, 2]`), strings otherwise, and stay
  strings where the file already has a string. `LOGHUBD_*` names without `__` are not config
  keys and are ignored (the CLI may use them).
- Deprecated keys are still accepted and set the keys that replace them (unless those are
  given too); `Config.warnings` says which to change (the daemon logs them at start-up):
  `consumer.retry_max_backoff` → `pull_retry_max_backoff` and `processor_retry_max_backoff`.
- `credentials = "env"` (in `[source]` or a `[[sources]]` entry) takes the keys from the
  Alibaba Cloud SDKs' `ALIBABA_CLOUD_ACCESS_KEY_ID` / `_SECRET` / `ALIBABA_CLOUD_SECURITY_TOKEN`
  in the same environ; the keys themselves are then refused in the file.

Several sources: `[[sources]]` tables replace `[source]` (a file with both is refused). Each
entry has a `name` and the keys of `[source]`, plus optional `[sources.consumer]` and
`[sources.processor]` (with `[sources.processor.<name>]` option tables); the top-level
`[consumer]` and `[processor]` are then defaults shared by all entries (an entry's own key
wins; option tables merge key by key). The consumer name is the daemon's: refused in
`[sources.consumer]`. Env vars: `LOGHUBD_SOURCES_<NAME>__<KEY>`,
`LOGHUBD_SOURCES_<NAME>__CONSUMER__<KEY>`, `LOGHUBD_SOURCES_<NAME>__PROCESSOR__[<TABLE>__]<KEY>`
(the name upper-cased, `-` as `_`), for entries the file declares; overrides:
`sources.<name>.<key>`. The single form is one source named "default".
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from loghubd.config.layers import ENV_PREFIX, _Layers
from loghubd.config.sections import (
    _EMPTY,
    ENV_CREDENTIALS,
    Config,
    ConsumerConfig,
    LogConfig,
    OpsConfig,
    ProcessorConfig,
    SourceConfig,
    SourceSpec,
    StartPosition,
)
from loghubd.config.sources import _build_multi, _build_single, _top_hint, _top_label
from loghubd.config.values import ConfigError, _coerce, _construct, _raise_if, _section_kwargs

__all__ = [
    "ENV_CREDENTIALS",
    "ENV_PREFIX",
    "Config",
    "ConfigError",
    "ConsumerConfig",
    "LogConfig",
    "OpsConfig",
    "ProcessorConfig",
    "SourceConfig",
    "SourceSpec",
    "StartPosition",
    "_coerce",
    "load",
    "loads",
    "read_text",
]


def _build(
    data: Mapping[str, Any], origin: str, environ: Mapping[str, str], overrides: Mapping[str, Any]
) -> Config:
    layers = _Layers()
    layers.add_toml(data, origin)
    layers.add_env(environ)
    layers.add_overrides(overrides)
    layers.take_misplaced_tables()
    problems = layers.problems
    top = {
        name: _section_kwargs(
            cls, layers.top.core.get(name, {}), problems, _top_label(name), _top_hint(name)
        )
        for name, cls in (("ops", OpsConfig), ("log", LogConfig))
    }
    specs = _build_multi(layers, environ) if layers.multi else _build_single(layers, environ)
    path = "" if origin.startswith("<") else origin  # "<string>", "<none>": no file
    specs = tuple(replace(spec, multi=layers.multi, origin=path) for spec in specs)
    ops = _construct(OpsConfig, top["ops"], problems, "ops")
    log = _construct(LogConfig, top["log"], problems, "log")
    _raise_if(problems)
    layers.warnings.extend(_unselected_tables(specs))
    warnings = tuple(dict.fromkeys(layers.warnings))  # a shared key warns once
    refs = layers.processor_refs()
    return Config(specs, ops, log, multi=layers.multi, warnings=warnings, processor_refs=refs)


def loads(
    text: str,
    environ: Mapping[str, str],
    overrides: Mapping[str, Any] = _EMPTY,
    *,
    origin: str = "<string>",
) -> Config:
    """Parse TOML `text`, then apply `environ` and `overrides` (see the module docstring)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"{origin}: invalid TOML: {exc}"]) from None
    return _build(data, origin, environ, overrides)


def load(
    path: str | Path | None, environ: Mapping[str, str], overrides: Mapping[str, Any] = _EMPTY
) -> Config:
    """Load the file at `path` (None: no file), then `environ`, then `overrides`.

    `overrides` maps dotted keys ("consumer.group", "processor.jsonl.path") or nested
    mappings to values; string values are parsed like env vars, None values are skipped.
    """
    if path is None:
        return _build({}, "<none>", environ, overrides)
    return loads(read_text(path), environ, overrides, origin=str(path))


def read_text(path: str | Path) -> str:
    """The text of the config file at `path`; `ConfigError` when it cannot be read."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read the config file: {exc.strerror}"]) from None


def _unselected_tables(specs: tuple[SourceSpec, ...]) -> list[str]:
    """A `[processor.<name>]` table no source selects: its keys are never read, not even
    checked, so a misspelt `processor.name` or a table left behind goes unnoticed (file sinks
    audit: a typo in an unused table passed `check-config`)."""
    selected = {spec.processor.name for spec in specs}
    tables = {name for spec in specs for name in spec.processor.options}
    return [
        f"processor.{name}: not the selected processor ({', '.join(sorted(selected))}): "
        "this table is not read"
        for name in sorted(tables - selected)
    ]
