"""Configuration: TOML file, then `LOGHUBD_<SECTION>__<KEY>` env vars, then overrides → Config.

The only module that reads the config file, looks at the environment's config variables, or
handles config dicts; everything else receives the frozen dataclasses below (the processor
plugin gets its own table, `ProcessorConfig.selected_options`, and validates it itself).

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

import contextlib
import difflib
import math
import re
import tomllib
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from datetime import date, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, NamedTuple
from urllib.parse import urlsplit

ENV_PREFIX = "LOGHUBD_"
_EMPTY: Mapping[str, Any] = MappingProxyType({})
_SECRET = MappingProxyType({"secret": True})
# Plugin tables have no schema here, so their secrets are recognised by name for redaction.
_SECRET_WORDS = ("secret", "password", "passwd", "token", "credential", "private_key")
_TRUE, _FALSE = frozenset({"true", "1", "yes"}), frozenset({"false", "0", "no"})

_DEFAULT_HEARTBEAT = 5.0
StartPosition = Literal["begin", "end"] | float  # float: unix seconds


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


@dataclass(frozen=True, slots=True)
class SourceConfig:
    """`[source]`: where the logstore is and how to sign requests."""

    endpoint: str  # a URL such as http://127.0.0.1:7100 or https://cn-hangzhou.log.aliyuncs.com
    project: str
    logstore: str
    access_key_id: str = ""
    access_key_secret: str = field(default="", metadata=_SECRET)
    security_token: str = field(default="", metadata=_SECRET)
    auth_version: Literal["v1", "v4"] = "v1"
    region: str = ""  # v4 signatures need it

    def __post_init__(self) -> None:
        try:
            url = urlsplit(self.endpoint)
            url_ok = url.scheme in ("http", "https") and bool(url.hostname) and url.port != 0
        except ValueError:  # e.g. a non-numeric port
            url_ok = False
        has_id, has_secret = bool(self.access_key_id), bool(self.access_key_secret)
        # fmt: off
        _validate("source", [
            (url_ok, "endpoint", "expected an http:// or https:// URL such as "
                                 f"https://cn-hangzhou.log.aliyuncs.com, got {self.endpoint!r}"),
            (bool(self.project), "project", "must not be empty"),
            (bool(self.logstore), "logstore", "must not be empty"),
            (bool(self.region) or self.auth_version != "v4", "region",
             "required when source.auth_version is 'v4'"),
            (has_id or not has_secret, "access_key_id",
             "required when source.access_key_secret is set"),
            (has_secret or not has_id, "access_key_secret",
             "required when source.access_key_id is set"),
            (has_id or not self.security_token, "security_token",
             "needs source.access_key_id and source.access_key_secret"),
        ])
        # fmt: on


@dataclass(frozen=True, slots=True)
class ConsumerConfig:
    """`[consumer]`: the consumer group, pacing, failure policy. Durations in seconds.

    `name` defaults to "": the app fills in "<hostname>-<pid>". When loaded from a file,
    `timeout` defaults to 3 * `heartbeat_interval` and `request_timeout` to
    min(10, timeout / 3); the class defaults below match the default heartbeat interval.
    """

    group: str
    name: str = ""
    start: StartPosition = field(default="begin", metadata={"parse": _parse_start})
    order: bool = False
    heartbeat_interval: float = _DEFAULT_HEARTBEAT
    timeout: float = 15.0  # the server drops us after this long without a heartbeat
    checkpoint_interval: float = 5.0
    max_fetch_log_groups: int = 1000
    fetch_interval: float = 0.2  # pause after a nearly empty pull; never while behind
    max_bytes_in_flight: int = 64 * 1024 * 1024
    shutdown_grace: float = 20.0
    max_attempts: int = 0  # 0 = unlimited
    on_failure: Literal["retry", "dead_letter", "stop"] = "retry"  # after max_attempts
    dead_letter_dir: str = "dead-letter"
    retry_initial_backoff: float = 0.5
    retry_max_backoff: float = 30.0
    request_timeout: float = 5.0  # below timeout, so a slow call cannot cost us the shards
    query: str = ""  # SPL query applied by the server when pulling; "" = none
    # A bounded run: read each shard up to the cursor of this time (unix seconds), commit
    # it, and stop once every shard of the group got there. None: run until stopped.
    end: float | None = field(default=None, metadata={"parse": _parse_end})
    # Only these shards are taken (never started nor heartbeated); None: every shard.
    shards: tuple[int, ...] | None = field(default=None, metadata={"parse": _parse_shards})

    def __post_init__(self) -> None:
        hb, policy = self.heartbeat_interval, self.on_failure
        # fmt: off
        _validate("consumer", [
            (bool(self.group), "group", "must not be empty"),
            (self.start in ("begin", "end") or not isinstance(self.start, str), "start",
             f"expected 'begin', 'end' or unix seconds, got {self.start!r}"),
            (hb > 0, "heartbeat_interval", "must be > 0"),
            (self.timeout > hb, "timeout", f"must be > consumer.heartbeat_interval ({hb})"),
            (self.checkpoint_interval > 0, "checkpoint_interval", "must be > 0"),
            (1 <= self.max_fetch_log_groups <= 1000, "max_fetch_log_groups",
             f"must be between 1 and 1000, got {self.max_fetch_log_groups}"),
            (self.fetch_interval >= 0, "fetch_interval", "must be >= 0"),
            (self.max_bytes_in_flight > 0, "max_bytes_in_flight", "must be > 0"),
            (self.shutdown_grace >= 0, "shutdown_grace", "must be >= 0"),
            (self.max_attempts >= 0, "max_attempts", "must be >= 0 (0 = unlimited)"),
            # With unlimited attempts the policy would never apply: surely not what was meant.
            (policy == "retry" or self.max_attempts > 0, "max_attempts",
             f"must be > 0 when consumer.on_failure is {policy!r}"),
            (policy != "dead_letter" or bool(self.dead_letter_dir), "dead_letter_dir",
             "required when consumer.on_failure is 'dead_letter'"),
            (self.retry_initial_backoff > 0, "retry_initial_backoff", "must be > 0"),
            (self.retry_max_backoff >= self.retry_initial_backoff, "retry_max_backoff",
             f"must be >= consumer.retry_initial_backoff ({self.retry_initial_backoff})"),
            (0 < self.request_timeout < self.timeout, "request_timeout",
             f"must be > 0 and < consumer.timeout ({self.timeout})"),
            (self.end is None or self.start != "end", "end",
             "a bounded run cannot start at 'end' (there would be nothing to read)"),
            (self.end is None or isinstance(self.start, str) or self.start < self.end, "end",
             f"must be after consumer.start ({self.start})"),
        ])
        # fmt: on


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return MappingProxyType({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    return value


def _thaw(value: Any, *, redact: bool = False) -> Any:
    if isinstance(value, Mapping):
        return {
            k: _thaw(_redact_by_name(k, v) if redact else v, redact=redact)
            for k, v in value.items()
        }
    if isinstance(value, tuple):
        return [_thaw(v, redact=redact) for v in value]
    return value


def _redact_by_name(key: str, value: Any) -> Any:
    secret = any(word in key.lower() for word in _SECRET_WORDS)
    return "***" if secret and isinstance(value, str) and value else value


@dataclass(frozen=True, slots=True)
class ProcessorConfig:
    """`[processor]`: which processor runs, plus every `[processor.<name>]` table, read-only.

    Tables are kept as nested read-only mappings (arrays become tuples); the plugin validates
    its own table.
    """

    name: str = "jsonl"
    options: Mapping[str, Mapping[str, Any]] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", _freeze(self.options))  # even if built from dicts
        _validate("processor", [(bool(self.name), "name", "must not be empty")])

    @property
    def selected_options(self) -> Mapping[str, Any]:
        """The selected processor's table: the only one passed on to plugins."""
        return self.options.get(self.name, _EMPTY)


@dataclass(frozen=True, slots=True)
class OpsConfig:
    """`[ops]`: the HTTP endpoint for /metrics, /healthz, /readyz and /status."""

    listen: str = "127.0.0.1:9464"  # host:port; [v6]:port; port 0 = any free port (tests)
    status_token: str = field(default="", metadata=_SECRET)  # "" = /status needs no token

    def __post_init__(self) -> None:
        host, _, port = self.listen.rpartition(":")
        ok = bool(host.strip("[]")) and port.isdigit() and int(port) <= 65535
        _validate("ops", [(ok, "listen", f"expected host:port, got {self.listen!r}")])

    @property
    def host(self) -> str:
        return self.listen.rpartition(":")[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.listen.rpartition(":")[2])


@dataclass(frozen=True, slots=True)
class LogConfig:
    """`[log]`: structlog level and renderer ("auto": console on a terminal, else JSON)."""

    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["auto", "json", "console"] = "auto"


_SOURCE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")


@dataclass(frozen=True, slots=True)
class SourceSpec:
    """One logstore to consume: a `[[sources]]` entry, or the single `[source]` form (named
    "default"). Its `consumer` and `processor` are the shared `[consumer]` / `[processor]`
    tables with the entry's own `[sources.consumer]` / `[sources.processor]` keys on top."""

    name: str  # in metrics (`source` label), logs, /readyz and /status
    source: SourceConfig
    consumer: ConsumerConfig
    processor: ProcessorConfig = field(default_factory=ProcessorConfig)

    def __post_init__(self) -> None:
        ok = bool(_SOURCE_NAME.fullmatch(self.name))
        _validate(
            "sources", [(ok, "name", f"expected letters, digits, _ and -, got {self.name!r}")]
        )


def _section_table(obj: Any) -> dict[str, Any]:
    """One section as a plain TOML-shaped dict, non-empty secrets as "***"."""
    table: dict[str, Any] = {}
    for f in fields(obj):
        value = getattr(obj, f.name)
        if f.name == "options":
            table.update(_thaw(value, redact=True))
        else:
            table[f.name] = "***" if f.metadata.get("secret") and value else value
    return table


@dataclass(frozen=True, slots=True)
class Config:
    """The whole configuration, one frozen section per concern; built by `load` / `loads`.

    `sources` has one entry per consumed logstore (one, named "default", for the single
    `[source]` form; `multi` tells which form the file used). `source`, `consumer` and
    `processor` are the first source's, for code that only knows one.
    """

    sources: tuple[SourceSpec, ...]
    ops: OpsConfig = field(default_factory=OpsConfig)
    log: LogConfig = field(default_factory=LogConfig)
    multi: bool = False

    def __post_init__(self) -> None:
        if not self.sources:
            raise ConfigError(["sources: at least one source is needed"])

    @property
    def source(self) -> SourceConfig:
        return self.sources[0].source

    @property
    def consumer(self) -> ConsumerConfig:
        return self.sources[0].consumer

    @property
    def processor(self) -> ProcessorConfig:
        return self.sources[0].processor

    def redacted(self) -> dict[str, Any]:
        """The effective config as plain TOML-shaped dicts, non-empty secrets as "***".

        The single form gives `source`, `consumer`, `processor`, `ops`, `log`; the
        `[[sources]]` form gives `sources` (each entry with its effective `consumer` and
        `processor`), `ops`, `log`.
        """
        out: dict[str, Any] = {}
        if self.multi:
            out["sources"] = [
                {
                    "name": spec.name,
                    **_section_table(spec.source),
                    "consumer": _section_table(spec.consumer),
                    "processor": _section_table(spec.processor),
                }
                for spec in self.sources
            ]
        else:
            spec = self.sources[0]
            for name in ("source", "consumer", "processor"):
                out[name] = _section_table(getattr(spec, name))
        out["ops"] = _section_table(self.ops)
        out["log"] = _section_table(self.log)
        return out


_SECTIONS: dict[str, type[Any]] = {
    "source": SourceConfig,
    "consumer": ConsumerConfig,
    "processor": ProcessorConfig,
    "ops": OpsConfig,
    "log": LogConfig,
}


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


_PER_SOURCE = ("source", "consumer", "processor")


def _env_name(source: str) -> str:
    """How a source's name appears in env var names: `my-app` → `my_app` (then upper case)."""
    return source.lower().replace("-", "_")


class _Tables:
    """The raw core values and processor option tables of one scope (the top level, or one
    `[[sources]]` entry), merged over the layers."""

    def __init__(self) -> None:
        self.core: dict[str, dict[str, _Value]] = {}
        self.options: dict[str, Any] = {}  # processor name → its (nested) table


class _Layers:
    """The raw values of all layers, merged: later layers replace earlier values key by key."""

    def __init__(self) -> None:
        self.top = _Tables()
        # `[[sources]]` entries in file order, by their env name: (name, tables).
        self.sources: dict[str, tuple[str, _Tables]] = {}
        self.multi = False  # the file has `[[sources]]`
        self.problems: list[str] = []

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


def _field_names(cls: type[Any]) -> list[str]:
    return [f.name for f in fields(cls) if f.name != "options"]


def _section_kwargs(
    name: str,
    given: Mapping[str, _Value],
    problems: list[str],
    label: Callable[[str], str],
    missing_hint: Callable[[str], str],
) -> dict[str, Any]:
    """Typed keyword arguments for section `name` from the raw `given` values; type problems
    go to `problems`, each key named by `label(key)`."""
    cls = _SECTIONS[name]
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
            got = "" if f.metadata.get("secret") else f", got {_show(value)}"
            problems.append(f"{label(key)}: {exc}{got} [{origin}]")
    for f in by_name.values():
        if f.default is MISSING and f.default_factory is MISSING and f.name not in given:
            problems.append(f"{label(f.name)}: required key is missing ({missing_hint(f.name)})")
    return kwargs


def _show(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 80 else text[:77] + '...'}"


def _derive(consumer: dict[str, Any]) -> None:
    """Derived defaults: only when the key was not given, so an explicit value is validated."""
    heartbeat = consumer.get("heartbeat_interval", _DEFAULT_HEARTBEAT)
    consumer.setdefault("timeout", 3 * heartbeat)
    consumer.setdefault("request_timeout", min(10.0, consumer["timeout"] / 3))


def _merged(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Nested tables merged key by key; `over` wins."""
    out = dict(base)
    for key, value in over.items():
        old = out.get(key)
        both = isinstance(value, Mapping) and isinstance(old, Mapping)
        out[key] = _merged(old, value) if both else value  # type: ignore[arg-type]
    return out


def _construct(cls: type[Any], kwargs: dict[str, Any], problems: list[str], rename: str) -> Any:
    """`cls(**kwargs)`, its range problems added to `problems` with the section's name
    replaced by `rename` (e.g. `consumer.timeout` → `sources.app.consumer.timeout`)."""
    try:
        return cls(**kwargs)
    except ConfigError as exc:  # range checks: gather every section's before raising
        for problem in exc.problems:
            section, dot, rest = problem.partition(".")
            problems.append(f"{rename}.{rest}" if dot and rename != section else problem)
    return None


def _top_label(section: str) -> Callable[[str], str]:
    return lambda key: f"{section}.{key}"


def _top_hint(section: str) -> Callable[[str], str]:
    return lambda key: f"set it in [{section}] or {ENV_PREFIX}{section.upper()}__{key.upper()}"


def _build_single(layers: _Layers) -> tuple[SourceSpec, ...]:
    top, problems = layers.top, layers.problems
    kwargs = {
        name: _section_kwargs(
            name, top.core.get(name, {}), problems, _top_label(name), _top_hint(name)
        )
        for name in _PER_SOURCE
    }
    _derive(kwargs["consumer"])
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
        env = f"{ENV_PREFIX}SOURCES_{_env_name(name).upper()}"
        return lambda key: f"set it in the [[sources]] entry named {name!r} or {env}__{key.upper()}"
    return lambda key: f"set it in [{section}] or in this entry's [sources.{section}]"


def _build_multi(layers: _Layers) -> tuple[SourceSpec, ...]:
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
                section,
                given,
                problems,
                _source_label(name, section, mine, shared),
                _source_hint(name, section),
            )
        _derive(kwargs["consumer"])
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
    seen: dict[tuple[str, str, str, str], str] = {}
    for spec in specs:
        s = spec.source
        where = (s.endpoint.rstrip("/"), s.project, s.logstore, spec.consumer.group)
        if where in seen:
            problems.append(
                f"sources.{spec.name}: consumes {s.project}/{s.logstore} with group "
                f"{spec.consumer.group!r}, like sources.{seen[where]}: one consumer per group"
            )
        seen.setdefault(where, spec.name)
    return tuple(specs)


def _build(
    data: Mapping[str, Any], origin: str, environ: Mapping[str, str], overrides: Mapping[str, Any]
) -> Config:
    layers = _Layers()
    layers.add_toml(data, origin)
    layers.add_env(environ)
    layers.add_overrides(overrides)
    problems = layers.problems
    top = {
        name: _section_kwargs(
            name, layers.top.core.get(name, {}), problems, _top_label(name), _top_hint(name)
        )
        for name in ("ops", "log")
    }
    specs = _build_multi(layers) if layers.multi else _build_single(layers)
    ops = _construct(OpsConfig, top["ops"], problems, "ops")
    log = _construct(LogConfig, top["log"], problems, "log")
    _raise_if(problems)
    return Config(specs, ops, log, multi=layers.multi)


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
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read the config file: {exc.strerror}"]) from None
    return loads(text, environ, overrides, origin=str(path))
