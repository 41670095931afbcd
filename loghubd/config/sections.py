"""The config sections: frozen, slotted dataclasses, one per concern, each validating its
own ranges in `__post_init__` (raising `ConfigError` with every problem, each naming its key).

Field metadata: `secret` (masked by `Config.redacted`, never echoed in errors) and `parse`
(a parser from `values` replacing the plain type coercion). `Config.redacted` renders the
effective config as TOML-shaped dicts for `loghubd check-config`.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, Literal, NamedTuple
from urllib.parse import urlsplit

from loghubd.config.redact import MASK, redact_text, redact_value
from loghubd.config.values import (
    ConfigError,
    _parse_end,
    _parse_seconds,
    _parse_shards,
    _parse_start,
    _validate,
)
from loghubd.protocol.names import name_problem

_EMPTY: Mapping[str, Any] = MappingProxyType({})
_SECRET = MappingProxyType({"secret": True})

# credentials = "env": the Alibaba Cloud SDKs' variables (the loader reads them).
ENV_CREDENTIALS = (
    "ALIBABA_CLOUD_ACCESS_KEY_ID",
    "ALIBABA_CLOUD_ACCESS_KEY_SECRET",
    "ALIBABA_CLOUD_SECURITY_TOKEN",
)
_DEFAULT_HEARTBEAT = 5.0
DEFAULT_PROCESSOR = "jsonl"
StartPosition = Literal["begin", "end"] | float  # float: unix seconds


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
    # Where the keys come from (`loghubd.sls.credentials`): "static" (the keys above), "env" (the
    # ALIBABA_CLOUD_* variables, which the loader puts in the keys above), "file" (a JSON file
    # re-read when it changes) or "command" (its stdout JSON, run again before expiry).
    credentials: Literal["static", "env", "file", "command"] = "static"
    credentials_file: str = ""
    credentials_command: str = ""  # words split like a shell does (shlex); run without one
    credentials_command_timeout: float = 10.0

    def __post_init__(self) -> None:
        try:
            url = urlsplit(self.endpoint)
            url_ok = url.scheme in ("http", "https") and bool(url.hostname) and url.port != 0
            userinfo = "@" in url.netloc
        except ValueError:  # e.g. a non-numeric port, an unclosed [IPv6 address
            url_ok, userinfo = False, False
        # fmt: off
        _validate("source", [
            (url_ok, "endpoint", "expected an http:// or https:// URL such as "
                                 "https://cn-hangzhou.log.aliyuncs.com, got "
                                 f"{redact_text(self.endpoint)!r}"),
            # Never sent (requests are signed with the access keys), but shown wherever the
            # endpoint is: /readyz, /status, the log.
            (not url_ok or not userinfo, "endpoint",
             f"{redact_text(self.endpoint)!r} has a user name or password in it, which SLS "
             "does not use: give the keys as source.access_key_id and "
             "source.access_key_secret (or source.credentials) and the URL without them"),
            *_name_checks(project=self.project, logstore=self.logstore),
            (bool(self.region) or self.auth_version != "v4", "region",
             "required when source.auth_version is 'v4'"),
            *self._key_checks(),
            *self._provider_checks(),
        ])
        # fmt: on

    def _key_checks(self) -> list[tuple[bool, str, str]]:
        kind = self.credentials
        has_id, has_secret = bool(self.access_key_id), bool(self.access_key_secret)
        # fmt: off
        if kind == "env":  # the loader filled the keys from the environment, if it could
            return [(has_id and has_secret, "credentials",
                     f'"env" needs {ENV_CREDENTIALS[0]} and {ENV_CREDENTIALS[1]} in the '
                     "environment")]
        if kind != "static":
            return [(not getattr(self, key), key,
                     f'not allowed when source.credentials is "{kind}" (the {kind} gives them)')
                    for key in ("access_key_id", "access_key_secret", "security_token")]
        return [
            (has_id or not has_secret, "access_key_id",
             "required when source.access_key_secret is set"),
            (has_secret or not has_id, "access_key_secret",
             "required when source.access_key_id is set"),
            (has_id or not self.security_token, "security_token",
             "needs source.access_key_id and source.access_key_secret"),
        ]
        # fmt: on

    def _provider_checks(self) -> list[tuple[bool, str, str]]:
        kind, path, command = self.credentials, self.credentials_file, self.credentials_command
        try:
            words, split_error = shlex.split(command), ""
        except ValueError as exc:  # e.g. "No closing quotation"
            words, split_error = [], str(exc)
        # fmt: off
        return [
            (kind == "file" or not path, "credentials_file",
             'only used when source.credentials is "file"'),
            (kind != "file" or bool(path), "credentials_file",
             'required when source.credentials is "file"'),
            (kind == "command" or not command, "credentials_command",
             'only used when source.credentials is "command"'),
            (kind != "command" or bool(command), "credentials_command",
             'required when source.credentials is "command"'),
            (kind != "command" or not command or bool(words), "credentials_command",
             "names no program"),
            (not split_error, "credentials_command",
             f"cannot be split into words: {split_error}"),
            (self.credentials_command_timeout > 0, "credentials_command_timeout", "must be > 0"),
        ]
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
    # After empty pulls in a row the pause doubles from fetch_interval up to this: what a
    # quiet shard costs, and the longest wait for the first log after a quiet spell. 0.5 s
    # is how often the official SDKs poll a shard that gave them little or nothing.
    idle_fetch_interval: float = 0.5
    max_bytes_in_flight: int = 64 * 1024 * 1024
    shutdown_grace: float = 20.0
    max_attempts: int = 0  # 0 = unlimited
    on_failure: Literal["retry", "dead_letter", "stop"] = "retry"  # after max_attempts
    dead_letter_dir: str = "dead-letter"
    retry_initial_backoff: float = 0.5  # the first wait before retrying a failed batch
    processor_retry_max_backoff: float = 30.0  # the longest wait between a batch's attempts
    pull_retry_max_backoff: float = 30.0  # the longest wait between failed pulls of a shard
    # Deprecated: sets both maxima above (the loader does it, with a warning); unused itself,
    # checked only when given, and not shown by `check-config`.
    retry_max_backoff: float | None = field(
        default=None, metadata={"parse": _parse_seconds, "deprecated": True}
    )
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
            *_name_checks(group=self.group),
            (self.start in ("begin", "end") or not isinstance(self.start, str), "start",
             f"expected 'begin', 'end' or unix seconds, got {self.start!r}"),
            (hb > 0, "heartbeat_interval", "must be > 0"),
            (self.timeout > hb, "timeout", f"must be > consumer.heartbeat_interval ({hb})"),
            (self.checkpoint_interval > 0, "checkpoint_interval", "must be > 0"),
            (1 <= self.max_fetch_log_groups <= 1000, "max_fetch_log_groups",
             f"must be between 1 and 1000, got {self.max_fetch_log_groups}"),
            (self.fetch_interval >= 0, "fetch_interval", "must be >= 0"),
            (self.idle_fetch_interval >= 0, "idle_fetch_interval", "must be >= 0"),
            (self.max_bytes_in_flight > 0, "max_bytes_in_flight", "must be > 0"),
            (self.shutdown_grace >= 0, "shutdown_grace", "must be >= 0"),
            (self.max_attempts >= 0, "max_attempts", "must be >= 0 (0 = unlimited)"),
            # With unlimited attempts the policy would never apply: surely not what was meant.
            (policy == "retry" or self.max_attempts > 0, "max_attempts",
             f"must be > 0 when consumer.on_failure is {policy!r}"),
            (policy != "dead_letter" or bool(self.dead_letter_dir), "dead_letter_dir",
             "required when consumer.on_failure is 'dead_letter'"),
            (self.retry_initial_backoff > 0, "retry_initial_backoff", "must be > 0"),
            (self.retry_max_backoff is None
             or self.retry_max_backoff >= self.retry_initial_backoff, "retry_max_backoff",
             f"must be >= consumer.retry_initial_backoff ({self.retry_initial_backoff})"),
            (self.processor_retry_max_backoff >= self.retry_initial_backoff,
             "processor_retry_max_backoff",
             f"must be >= consumer.retry_initial_backoff ({self.retry_initial_backoff})"),
            (self.pull_retry_max_backoff > 0, "pull_retry_max_backoff", "must be > 0"),
            (0 < self.request_timeout < self.timeout, "request_timeout",
             f"must be > 0 and < consumer.timeout ({self.timeout})"),
            (self.end is None or self.start != "end", "end",
             "a bounded run cannot start at 'end' (there would be nothing to read)"),
            (self.end is None or isinstance(self.start, str) or self.start < self.end, "end",
             f"must be after consumer.start ({_when(self.start)}), "
             f"got {_when(self.end or 0)}"),
        ])
        # fmt: on


def _when(unix: float | str) -> str:
    """A time as the file may give it: ISO 8601 in UTC, with the unix seconds ("begin" and
    "end" as they are)."""
    if isinstance(unix, str):
        return unix
    iso = datetime.fromtimestamp(unix, UTC).isoformat().replace("+00:00", "Z")
    return f"{iso}, unix {int(unix) if float(unix).is_integer() else unix}"


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return MappingProxyType({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    return value


def _thaw(value: Any, *, redact: bool = False, name: str = "") -> Any:
    """Plain dicts and lists again; with `redact`, what `check-config` may print (plugin
    tables have no schema here: `loghubd.config.redact` tells secrets by name and shape)."""
    if isinstance(value, Mapping):
        return {k: _thaw(v, redact=redact, name=k) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_thaw(v, redact=redact, name=name) for v in value]
    return redact_value(name, value) if redact else value


@dataclass(frozen=True, slots=True)
class ProcessorConfig:
    """`[processor]`: which processor runs, plus every `[processor.<name>]` table, read-only.

    Tables are kept as nested read-only mappings (arrays become tuples); the plugin validates
    its own table.
    """

    name: str = DEFAULT_PROCESSOR
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

    def listen_warning(self) -> str:
        """What `loghubd check-config` warns about `listen` on this machine ("" nothing): a
        host that does not resolve here, which `loghubd run` could not listen on (exit 4).
        A warning, not a problem: the file may be checked elsewhere than where it runs.
        Looks the host up as the ops server's listening does (a DNS query for a name); the
        loader never calls it."""
        import socket

        try:
            socket.getaddrinfo(
                self.host, self.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )
        except (OSError, UnicodeError) as exc:  # gaierror; a label too long for IDNA
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            return (
                f"ops.listen: host {self.host!r} does not resolve on this machine ({why}): "
                "loghubd run would exit 4 here"
            )
        return ""


@dataclass(frozen=True, slots=True)
class LogConfig:
    """`[log]`: structlog level and renderer ("auto": console on a terminal, else JSON)."""

    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["auto", "json", "console"] = "auto"


def _name_checks(**names: str) -> list[tuple[bool, str, str]]:
    """The service's rule for project, logstore and consumer group names (`protocol.names`)."""
    checks = []
    for key, name in names.items():
        problem = "must not be empty" if not name else name_problem(name)
        checks.append((problem is None, key, f"{problem}: {name!r}" if name else str(problem)))
    return checks


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
    # Where it was configured, for messages that name its keys: a `[[sources]]` entry or
    # `[source]`, and the config file ("" when it came from no file). Set by the loader.
    multi: bool = field(default=False, compare=False)
    origin: str = field(default="", compare=False)

    @property
    def keys(self) -> str:
        """Where messages say this source's keys are: `source` (`source.logstore`), or
        `sources.app` (`sources.app.logstore`) for the `[[sources]]` entry named app."""
        return f"sources.{self.name}" if self.multi else "source"

    @property
    def letter_origin(self) -> tuple[tuple[str, str], ...]:
        """What this source's dead letters say they come from (their note's `origin`):
        `loghubd dead-letters` takes only the letters of the source it is given."""
        s = self.source
        return (("project", s.project), ("logstore", s.logstore), ("group", self.consumer.group))

    def __post_init__(self) -> None:
        ok = bool(_SOURCE_NAME.fullmatch(self.name))
        _validate(
            "sources", [(ok, "name", f"expected letters, digits, _ and -, got {self.name!r}")]
        )


class ProcessorRef(NamedTuple):
    """Where the configuration names a processor: a `name` key choosing it (or the default),
    or an option table given for it. Only the plugins know which processors exist, so these
    are checked against them after loading (`loghubd.plugins.configured`)."""

    key: str  # as messages name it: `processor.name`, `sources.app.processor.parquet`
    name: str  # the processor's
    origin: str  # the file, an env var or "override"; "" for the default (or built in Python)


def _processor_refs(sources: tuple[SourceSpec, ...], multi: bool) -> tuple[ProcessorRef, ...]:
    """The refs of a Config built in Python, not loaded: each source's own, keys as the
    `[[sources]]` form names them when `multi`."""
    refs = []
    for spec in sources:
        where = f"sources.{spec.name}.processor" if multi else "processor"
        refs.append(ProcessorRef(f"{where}.name", spec.processor.name, ""))
        refs.extend(ProcessorRef(f"{where}.{name}", name, "") for name in spec.processor.options)
    return tuple(dict.fromkeys(refs))


def _section_table(obj: Any) -> dict[str, Any]:
    """One section as a plain TOML-shaped dict, non-empty secrets as "***" (and URL
    passwords and secret `name=value` pairs within other strings)."""
    table: dict[str, Any] = {}
    for f in fields(obj):
        if f.metadata.get("deprecated"):
            continue
        value = getattr(obj, f.name)
        if f.name == "options":
            table.update(_thaw(value, redact=True))
        else:
            # The core sections say which fields are secrets (metadata): by name only the
            # plugin tables are judged (`credentials_file` is not a secret), by shape all.
            if f.metadata.get("secret") and value:
                table[f.name] = MASK
            else:
                table[f.name] = redact_text(value) if isinstance(value, str) else value
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
    # Deprecated keys the configuration used, one message each (see `loghubd.config`).
    warnings: tuple[str, ...] = ()
    # Where the configuration names processors, for the check against the installed ones
    # (`loghubd.plugins.configured`): filled by the loader, else made from `sources`.
    processor_refs: tuple[ProcessorRef, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        if not self.sources:
            raise ConfigError(["sources: at least one source is needed"])
        if not self.processor_refs:
            refs = _processor_refs(self.sources, self.multi)
            object.__setattr__(self, "processor_refs", refs)

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


_PER_SOURCE = ("source", "consumer", "processor")
