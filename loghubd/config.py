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
"""

from __future__ import annotations

import contextlib
import difflib
import math
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


@dataclass(frozen=True, slots=True)
class Config:
    """The whole configuration, one frozen section per concern; built by `load` / `loads`."""

    source: SourceConfig
    consumer: ConsumerConfig
    processor: ProcessorConfig = field(default_factory=ProcessorConfig)
    ops: OpsConfig = field(default_factory=OpsConfig)
    log: LogConfig = field(default_factory=LogConfig)

    def redacted(self) -> dict[str, Any]:
        """The effective config as plain TOML-shaped dicts, non-empty secrets as "***"."""
        out: dict[str, Any] = {}
        for section in fields(self):
            obj = getattr(self, section.name)
            table: dict[str, Any] = {}
            for f in fields(obj):
                value = getattr(obj, f.name)
                if f.name == "options":
                    table.update(_thaw(value, redact=True))
                else:
                    table[f.name] = "***" if f.metadata.get("secret") and value else value
            out[section.name] = table
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


class _Layers:
    """The raw values of all layers, merged: later layers replace earlier values key by key."""

    def __init__(self) -> None:
        self.core: dict[str, dict[str, _Value]] = {}
        self.options: dict[str, Any] = {}  # processor name → its (nested) table
        self.problems: list[str] = []

    def set(self, path: Sequence[str], value: Any, origin: str, textual: bool) -> None:
        section, key = path[0], ".".join(path)
        if section not in _SECTIONS:
            self.problems.append(
                f"{key}: unknown section {section!r}{_suggest(section, list(_SECTIONS))} [{origin}]"
            )
        elif section == "processor" and len(path) >= 3:
            self._set_option(path[1:], value, origin, textual)
        elif len(path) != 2:
            self.problems.append(f"{key}: unknown key [{origin}]")
        else:
            self.core.setdefault(section, {})[path[1]] = _Value(value, origin, textual)

    def _set_option(self, path: Sequence[str], value: Any, origin: str, textual: bool) -> None:
        table = self.options
        for part in path[:-1]:
            table = table.setdefault(part, {})
            if not isinstance(table, dict):
                self.problems.append(
                    f"processor.{'.'.join(path)}: {part!r} is not a table [{origin}]"
                )
                return
        if textual and not isinstance(table.get(path[-1]), str):
            value = _guess(value)
        table[path[-1]] = value

    def add_toml(self, data: Mapping[str, Any], origin: str) -> None:
        for section, table in data.items():
            if section not in _SECTIONS:
                self.problems.append(
                    f"{section}: unknown section{_suggest(section, list(_SECTIONS))} [{origin}]"
                )
                continue
            if not isinstance(table, dict):
                self.problems.append(f"{section}: expected a table [{section}] [{origin}]")
                continue
            for key, value in table.items():
                is_table = section == "processor" and isinstance(value, dict)
                if is_table and key not in _field_names(ProcessorConfig):
                    for name, option in value.items():
                        self.set([section, key, name], option, origin, False)
                    self.options.setdefault(key, {})  # keep empty tables too
                else:
                    self.set([section, key], value, origin, False)

    def add_env(self, environ: Mapping[str, str]) -> None:
        for var, text in sorted(environ.items()):
            if not var.startswith(ENV_PREFIX) or "__" not in var:
                continue
            head, *rest = var[len(ENV_PREFIX) :].lower().split("__")
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


def _section_kwargs(name: str, layers: _Layers) -> dict[str, Any]:
    cls = _SECTIONS[name]
    hints = typing.get_type_hints(cls)
    by_name = {f.name: f for f in fields(cls) if f.name != "options"}
    kwargs: dict[str, Any] = {}
    for key, (value, origin, textual) in layers.core.get(name, {}).items():
        f = by_name.get(key)
        if f is None:
            layers.problems.append(
                f"{name}.{key}: unknown key{_suggest(key, list(by_name), name + '.')} [{origin}]"
            )
            continue
        parse: Callable[[Any], Any] | None = f.metadata.get("parse")
        try:
            kwargs[key] = parse(value) if parse else _coerce(hints[key], value, textual)
        except _Invalid as exc:
            # Never echo a secret, not even a mistyped one.
            got = "" if f.metadata.get("secret") else f", got {_show(value)}"
            layers.problems.append(f"{name}.{key}: {exc}{got} [{origin}]")
    given = layers.core.get(name, {})
    for f in by_name.values():
        if f.default is MISSING and f.default_factory is MISSING and f.name not in given:
            env = f"{ENV_PREFIX}{name.upper()}__{f.name.upper()}"
            layers.problems.append(
                f"{name}.{f.name}: required key is missing (set it in [{name}] or {env})"
            )
    return kwargs


def _show(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 80 else text[:77] + '...'}"


def _build(
    data: Mapping[str, Any], origin: str, environ: Mapping[str, str], overrides: Mapping[str, Any]
) -> Config:
    layers = _Layers()
    layers.add_toml(data, origin)
    layers.add_env(environ)
    layers.add_overrides(overrides)
    kwargs = {name: _section_kwargs(name, layers) for name in _SECTIONS}
    consumer = kwargs["consumer"]
    # Derived defaults: only when the key was not given, so an explicit value is validated.
    heartbeat = consumer.get("heartbeat_interval", _DEFAULT_HEARTBEAT)
    consumer.setdefault("timeout", 3 * heartbeat)
    consumer.setdefault("request_timeout", min(10.0, consumer["timeout"] / 3))
    kwargs["processor"]["options"] = layers.options
    _raise_if(layers.problems)
    sections: dict[str, Any] = {}
    problems: list[str] = []
    for name, cls in _SECTIONS.items():
        try:
            sections[name] = cls(**kwargs[name])
        except ConfigError as exc:  # range checks: gather every section's before raising
            problems.extend(exc.problems)
    _raise_if(problems)
    return Config(**sections)


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
