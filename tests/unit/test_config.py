"""Config loading: valid and invalid files, env and override layers, plugin tables, redaction."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from loghubd.config import (
    Config,
    ConfigError,
    ConsumerConfig,
    OpsConfig,
    ProcessorConfig,
    SourceSpec,
    _coerce,
    load,
    loads,
)

BASE = """
[source]
endpoint = "http://127.0.0.1:7100"
project = "proj"
logstore = "ls"

[consumer]
group = "grp"
"""


def attr(cfg: Config, dotted: str) -> Any:
    obj: Any = cfg
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


VALID: list[tuple[str, str, dict[str, str], dict[str, Any], dict[str, Any]]] = [
    # name, extra TOML appended to BASE, environ, overrides, expected attributes
    (
        "defaults",
        "",
        {},
        {},
        {
            "source.access_key_id": "",
            "source.auth_version": "v1",
            "source.region": "",
            "consumer.name": "",
            "consumer.start": "begin",
            "consumer.order": False,
            "consumer.heartbeat_interval": 5.0,
            "consumer.timeout": 15.0,
            "consumer.checkpoint_interval": 5.0,
            "consumer.max_fetch_log_groups": 1000,
            "consumer.fetch_interval": 0.2,
            "consumer.idle_fetch_interval": 0.5,
            "consumer.max_bytes_in_flight": 64 * 1024 * 1024,
            "consumer.shutdown_grace": 20.0,
            "consumer.max_attempts": 0,
            "consumer.on_failure": "retry",
            "consumer.dead_letter_dir": "dead-letter",
            "consumer.retry_initial_backoff": 0.5,
            "consumer.retry_max_backoff": None,  # deprecated; not given
            "consumer.request_timeout": 5.0,
            "consumer.query": "",
            "consumer.end": None,
            "consumer.shards": None,
            "processor.name": "jsonl",
            "ops.listen": "127.0.0.1:9464",
            "ops.host": "127.0.0.1",
            "ops.port": 9464,
            "ops.status_token": "",
            "log.level": "info",
            "log.format": "auto",
        },
    ),
    (
        "timeout derived from heartbeat",
        "heartbeat_interval = 2",
        {},
        {},
        {"consumer.timeout": 6.0, "consumer.request_timeout": 2.0},
    ),
    (
        "request_timeout capped at 10",
        "heartbeat_interval = 20",
        {},
        {},
        {"consumer.timeout": 60.0, "consumer.request_timeout": 10.0},
    ),
    (
        "explicit timeout",
        "timeout = 12.0",
        {},
        {},
        {"consumer.timeout": 12.0, "consumer.request_timeout": 4.0},
    ),
    (
        "explicit request_timeout",
        "request_timeout = 1.5",
        {},
        {},
        {"consumer.request_timeout": 1.5},
    ),
    (
        "an integer for a float",
        "checkpoint_interval = 2",
        {},
        {},
        {"consumer.checkpoint_interval": 2.0},
    ),
    ("start end", 'start = "end"', {}, {}, {"consumer.start": "end"}),
    ("start unix seconds", "start = 1714521600", {}, {}, {"consumer.start": 1714521600.0}),
    (
        "start ISO string",
        'start = "2024-05-01T00:00:00Z"',
        {},
        {},
        {"consumer.start": 1714521600.0},
    ),
    (
        "start TOML datetime",
        "start = 2024-05-01T08:00:00+08:00",
        {},
        {},
        {"consumer.start": 1714521600.0},
    ),
    (
        "start from env",
        "",
        {"LOGHUBD_CONSUMER__START": "1714521600"},
        {},
        {"consumer.start": 1714521600.0},
    ),
    (
        "dead letter policy",
        'on_failure = "dead_letter"\nmax_attempts = 3',
        {},
        {},
        {"consumer.on_failure": "dead_letter", "consumer.max_attempts": 3},
    ),
    (
        "v4 with region",
        "",
        {"LOGHUBD_SOURCE__AUTH_VERSION": "v4", "LOGHUBD_SOURCE__REGION": "cn-hangzhou"},
        {},
        {"source.auth_version": "v4", "source.region": "cn-hangzhou"},
    ),
    (
        "ops on IPv6, any port",
        '[ops]\nlisten = "[::1]:0"',
        {},
        {},
        {"ops.host": "::1", "ops.port": 0},
    ),
    (
        "log section",
        '[log]\nlevel = "debug"\nformat = "json"',
        {},
        {},
        {"log.level": "debug", "log.format": "json"},
    ),
    (
        "env overrides the file",
        "",
        {"LOGHUBD_CONSUMER__GROUP": "grp-x"},
        {},
        {"consumer.group": "grp-x"},
    ),
    (
        "env values are parsed",
        "",
        {
            "LOGHUBD_CONSUMER__ORDER": "yes",
            "LOGHUBD_CONSUMER__MAX_FETCH_LOG_GROUPS": "10",
            "LOGHUBD_CONSUMER__HEARTBEAT_INTERVAL": "1.5",
            "LOGHUBD_CONSUMER__NAME": "c-1",
        },
        {},
        {
            "consumer.order": True,
            "consumer.max_fetch_log_groups": 10,
            "consumer.heartbeat_interval": 1.5,
            "consumer.timeout": 4.5,
            "consumer.name": "c-1",
        },
    ),
    ("env false", "order = true", {"LOGHUBD_CONSUMER__ORDER": "0"}, {}, {"consumer.order": False}),
    (
        "secrets from env",
        "",
        {"LOGHUBD_SOURCE__ACCESS_KEY_ID": "id", "LOGHUBD_SOURCE__ACCESS_KEY_SECRET": "s3"},
        {},
        {"source.access_key_id": "id", "source.access_key_secret": "s3"},
    ),
    (
        "LOGHUBD_ names without __ are ignored",
        "",
        {"LOGHUBD_CONFIG": "/x", "HOME": "/root"},
        {},
        {"consumer.group": "grp"},
    ),
    (
        "overrides beat env",
        "",
        {"LOGHUBD_CONSUMER__GROUP": "grp-x"},
        {"consumer.group": "grp-y"},
        {"consumer.group": "grp-y"},
    ),
    (
        "nested and typed overrides",
        "",
        {},
        {"consumer": {"order": True, "max_attempts": 2}},
        {"consumer.order": True, "consumer.max_attempts": 2},
    ),
    (
        "string overrides are parsed",
        "",
        {},
        {"consumer.shutdown_grace": "3"},
        {"consumer.shutdown_grace": 3.0},
    ),
    (
        "bounded run",
        "start = 1714521600\nend = 2024-05-01T01:00:00Z",
        {},
        {},
        {"consumer.start": 1714521600.0, "consumer.end": 1714525200.0},
    ),
    ("end from begin", 'end = "1714525200"', {}, {}, {"consumer.end": 1714525200.0}),
    (
        "end from env, empty env clears it",
        "end = 1714525200",
        {"LOGHUBD_CONSUMER__END": ""},
        {},
        {"consumer.end": None},
    ),
    ("shards as a list", "shards = [3, 1, 1]", {}, {}, {"consumer.shards": (1, 3)}),
    ("shards as ranges", 'shards = "0-2, 8,5-5"', {}, {}, {"consumer.shards": (0, 1, 2, 5, 8)}),
    ("one shard", "shards = 4", {}, {}, {"consumer.shards": (4,)}),
    (
        "shards from env",
        "",
        {"LOGHUBD_CONSUMER__SHARDS": "2-3"},
        {},
        {"consumer.shards": (2, 3)},
    ),
    ("single form is source 'default'", "", {}, {}, {"multi": False}),
]


@pytest.mark.parametrize(
    ("extra", "environ", "overrides", "expected"),
    [pytest.param(*case[1:], id=case[0]) for case in VALID],
)
def test_valid(
    extra: str, environ: dict[str, str], overrides: dict[str, Any], expected: dict[str, Any]
) -> None:
    cfg = loads(f"{BASE}\n{extra}\n", environ, overrides)
    for dotted, value in expected.items():
        got = attr(cfg, dotted)
        assert got == value, dotted
        assert type(got) is type(value), dotted


def toml_with(consumer_extra: str = "", tail: str = "") -> str:
    return f"{BASE}{consumer_extra}\n{tail}\n"


INVALID: list[tuple[str, str, dict[str, str], dict[str, Any], list[str]]] = [
    # name, TOML, environ, overrides, fragments that must all appear in the message
    (
        "misspelt key",
        toml_with("grup = 'x'"),
        {},
        {},
        ["consumer.grup: unknown key (did you mean consumer.group?)"],
    ),
    (
        "unknown section",
        toml_with(tail="[consumr]\ngroup = 'g'"),
        {},
        {},
        ["consumr: unknown section (did you mean consumer?)"],
    ),
    ("section is not a table", "log = 3\n" + BASE, {}, {}, ["log: expected a table"]),
    (
        "misspelt env key",
        BASE,
        {"LOGHUBD_CONSUMER__GRUP": "x"},
        {},
        ["consumer.grup: unknown key (did you mean consumer.group?)", "LOGHUBD_CONSUMER__GRUP"],
    ),
    (
        "unknown env section",
        BASE,
        {"LOGHUBD_CONSUMR__GROUP": "x"},
        {},
        ["consumr.group: unknown section", "did you mean consumer?"],
    ),
    ("env key too deep", BASE, {"LOGHUBD_CONSUMER__A__B": "x"}, {}, ["consumer.a.b: unknown key"]),
    (
        "unknown override",
        BASE,
        {},
        {"consumer.grop": "x"},
        ["consumer.grop: unknown key (did you mean consumer.group?)", "override"],
    ),
    (
        "processor scalar typo",
        toml_with(tail="[processor]\nnmae = 'x'"),
        {},
        {},
        ["processor.nmae: unknown key (did you mean processor.name?)"],
    ),
    (
        "processor table given as a value",
        toml_with(tail="[processor]\njsonl = 'x'"),
        {},
        {},
        ["processor.jsonl: expected a table of the jsonl processor's options, got a string 'x'"],
    ),
    (
        "chosen processor's table given as a value by env var",
        toml_with(tail="[processor]\nname = 'parquet'"),
        {"LOGHUBD_PROCESSOR__PARQUET": "/data"},
        {},
        [
            "processor.parquet: expected a table of the parquet processor's options, got a "
            "string '/data' [LOGHUBD_PROCESSOR__PARQUET]"
        ],
    ),
    (
        "a wrong value is quoted in the file's words",
        toml_with("max_attempts = [1]"),
        {},
        {},
        ["consumer.max_attempts: expected an integer, got a list [1]"],
    ),
    (
        "duration as text",
        toml_with("heartbeat_interval = '5s'"),
        {},
        {},
        ["consumer.heartbeat_interval: expected a number", "'5s'"],
    ),
    (
        "float for int",
        toml_with("max_fetch_log_groups = 1.5"),
        {},
        {},
        ["consumer.max_fetch_log_groups: expected an integer"],
    ),
    (
        "bool for int",
        toml_with("max_attempts = true"),
        {},
        {},
        ["consumer.max_attempts: expected an integer"],
    ),
    (
        "TOML string for bool",
        toml_with("order = 'yes'"),
        {},
        {},
        ["consumer.order: expected a boolean"],
    ),
    (
        "bad env bool",
        BASE,
        {"LOGHUBD_CONSUMER__ORDER": "maybe"},
        {},
        ["consumer.order: expected a boolean", "LOGHUBD_CONSUMER__ORDER"],
    ),
    (
        "bad env int",
        BASE,
        {"LOGHUBD_CONSUMER__MAX_ATTEMPTS": "abc"},
        {},
        ["consumer.max_attempts: expected an integer"],
    ),
    (
        "non-finite float",
        toml_with("heartbeat_interval = inf"),
        {},
        {},
        ["consumer.heartbeat_interval: expected a finite number"],
    ),
    (
        "not one of the choices",
        toml_with("on_failure = 'skip'"),
        {},
        {},
        ["consumer.on_failure: expected one of 'retry', 'dead_letter', 'stop'"],
    ),
    ("bad log level", toml_with(tail="[log]\nlevel = 'trace'"), {}, {}, ["log.level"]),
    (
        "missing source key",
        BASE.replace('project = "proj"', ""),
        {},
        {},
        ["source.project: required key is missing", "LOGHUBD_SOURCE__PROJECT"],
    ),
    (
        "missing consumer section",
        BASE.split("[consumer]")[0],
        {},
        {},
        ["consumer.group: required key is missing"],
    ),
    ("nothing at all", "", {}, {}, ["source.endpoint", "source.project", "consumer.group"]),
    (
        "empty group",
        toml_with().replace('group = "grp"', 'group = ""'),
        {},
        {},
        ["consumer.group: must not be empty"],
    ),
    (
        "zero fetch size",
        toml_with("max_fetch_log_groups = 0"),
        {},
        {},
        ["consumer.max_fetch_log_groups: must be between 1 and 1000"],
    ),
    (
        "fetch size too big",
        toml_with("max_fetch_log_groups = 1001"),
        {},
        {},
        ["consumer.max_fetch_log_groups"],
    ),
    (
        "zero heartbeat",
        toml_with("heartbeat_interval = 0\ntimeout = 1"),
        {},
        {},
        ["consumer.heartbeat_interval: must be > 0"],
    ),
    (
        "timeout not above heartbeat",
        toml_with("timeout = 5"),
        {},
        {},
        ["consumer.timeout: must be > consumer.heartbeat_interval"],
    ),
    (
        "request_timeout not below timeout",
        toml_with("request_timeout = 15"),
        {},
        {},
        ["consumer.request_timeout"],
    ),
    (
        "negative fetch_interval",
        toml_with("fetch_interval = -1"),
        {},
        {},
        ["consumer.fetch_interval"],
    ),
    (
        "negative idle_fetch_interval",
        toml_with("idle_fetch_interval = -0.5"),
        {},
        {},
        ["consumer.idle_fetch_interval"],
    ),
    (
        "zero checkpoint interval",
        toml_with("checkpoint_interval = 0"),
        {},
        {},
        ["consumer.checkpoint_interval"],
    ),
    (
        "zero bytes budget",
        toml_with("max_bytes_in_flight = 0"),
        {},
        {},
        ["consumer.max_bytes_in_flight"],
    ),
    ("negative grace", toml_with("shutdown_grace = -1"), {}, {}, ["consumer.shutdown_grace"]),
    (
        "backoff inverted",
        toml_with("retry_initial_backoff = 5\nretry_max_backoff = 1"),
        {},
        {},
        ["consumer.retry_max_backoff"],
    ),
    (
        "zero initial backoff",
        toml_with("retry_initial_backoff = 0"),
        {},
        {},
        ["consumer.retry_initial_backoff"],
    ),
    (
        "policy that never applies",
        toml_with("on_failure = 'stop'"),
        {},
        {},
        ["consumer.max_attempts: must be > 0 when consumer.on_failure is 'stop'"],
    ),
    (
        "dead letter without dir",
        toml_with("on_failure = 'dead_letter'\nmax_attempts = 2\ndead_letter_dir = ''"),
        {},
        {},
        ["consumer.dead_letter_dir"],
    ),
    ("start word", toml_with("start = 'yesterday'"), {}, {}, ["consumer.start", "ISO-8601"]),
    (
        "start without zone",
        toml_with("start = '2024-05-01T00:00:00'"),
        {},
        {},
        ["consumer.start: the timestamp needs a time zone"],
    ),
    (
        "start TOML local datetime",
        toml_with("start = 2024-05-01T00:00:00"),
        {},
        {},
        ["consumer.start: the timestamp needs a time zone"],
    ),
    ("start date", toml_with("start = 2024-05-01"), {}, {}, ["consumer.start: a date needs"]),
    (
        "start in milliseconds",
        toml_with("start = 1714521600000"),
        {},
        {},
        ["consumer.start: looks like milliseconds"],
    ),
    ("negative start", toml_with("start = -1"), {}, {}, ["consumer.start"]),
    ("bool start", toml_with("start = true"), {}, {}, ["consumer.start"]),
    (
        "endpoint without scheme",
        BASE.replace("http://", ""),
        {},
        {},
        ["source.endpoint: expected an http:// or https:// URL"],
    ),
    (
        "endpoint with another scheme",
        BASE.replace("http://", "ftp://"),
        {},
        {},
        ["source.endpoint"],
    ),
    ("endpoint with a bad port", BASE.replace("7100", "x"), {}, {}, ["source.endpoint"]),
    (
        "endpoint with a password, not a URL either",
        BASE.replace("http://", "ftp://AK:EpSecret@"),
        {},
        {},
        ["source.endpoint: expected an http:// or https:// URL", "got 'ftp://AK:***@127.0.0.1"],
    ),
    (
        "endpoint with an unclosed IPv6 address",
        BASE.replace("127.0.0.1:7100", "[::1"),
        {},
        {},
        ["source.endpoint: expected an http:// or https:// URL"],
    ),
    (
        # never sent (requests are signed), but shown wherever the endpoint is
        "endpoint with a user and password",
        BASE.replace("http://", "http://AK:EpSecret@"),
        {},
        {},
        ["source.endpoint: 'http://AK:***@127.0.0.1:7100' has a user name or password in it"],
    ),
    ("empty logstore", BASE.replace('"ls"', '""'), {}, {}, ["source.logstore: must not be empty"]),
    (
        "v4 without region",
        BASE,
        {"LOGHUBD_SOURCE__AUTH_VERSION": "v4"},
        {},
        ["source.region: required when source.auth_version is 'v4'"],
    ),
    (
        "bad auth version",
        BASE,
        {"LOGHUBD_SOURCE__AUTH_VERSION": "v2"},
        {},
        ["source.auth_version: expected one of 'v1', 'v4'"],
    ),
    (
        "secret without id",
        BASE,
        {"LOGHUBD_SOURCE__ACCESS_KEY_SECRET": "s"},
        {},
        ["source.access_key_id: required when source.access_key_secret is set"],
    ),
    (
        "id without secret",
        BASE,
        {"LOGHUBD_SOURCE__ACCESS_KEY_ID": "i"},
        {},
        ["source.access_key_secret: required when source.access_key_id is set"],
    ),
    (
        "token without keys",
        BASE,
        {"LOGHUBD_SOURCE__SECURITY_TOKEN": "t"},
        {},
        ["source.security_token"],
    ),
    ("listen without port", toml_with(tail="[ops]\nlisten = '9464'"), {}, {}, ["ops.listen"]),
    ("listen with a bad port", toml_with(tail="[ops]\nlisten = 'h:99999'"), {}, {}, ["ops.listen"]),
    (
        "empty processor name",
        toml_with(tail="[processor]\nname = ''"),
        {},
        {},
        ["processor.name: must not be empty"],
    ),
    (
        "option path through a value",
        toml_with(tail="[processor.jsonl]\npath = 'x'"),
        {"LOGHUBD_PROCESSOR_JSONL__PATH__SUB": "1"},
        {},
        ["processor.jsonl.path.sub"],
    ),
    ("invalid TOML", "[source\n", {}, {}, ["<string>: invalid TOML"]),
    ("end is a word", toml_with("end = 'end'"), {}, {}, ["consumer.end: expected unix seconds"]),
    (
        "end without zone",
        toml_with("end = 2024-05-01T00:00:00"),
        {},
        {},
        ["consumer.end: the timestamp needs a time zone"],
    ),
    (
        "bounded run from the end",
        toml_with("start = 'end'\nend = 1714525200"),
        {},
        {},
        ["consumer.end: a bounded run cannot start at 'end'"],
    ),
    (
        "end before start",
        toml_with("start = 1714525200\nend = 1714521600"),
        {},
        {},
        [
            "consumer.end: must be after consumer.start (2024-05-01T01:00:00Z, unix 1714525200), "
            "got 2024-05-01T00:00:00Z, unix 1714521600"
        ],
    ),
    ("empty shard list", toml_with("shards = []"), {}, {}, ["consumer.shards: must name at"]),
    ("inverted range", toml_with("shards = '3-1'"), {}, {}, ["consumer.shards: bad range '3-1'"]),
    ("shard words", toml_with("shards = 'a-b'"), {}, {}, ["consumer.shards: expected shard ids"]),
    ("negative shard", toml_with("shards = [-1]"), {}, {}, ["consumer.shards: shard ids are >= 0"]),
    ("bool shards", toml_with("shards = [true]"), {}, {}, ["consumer.shards: expected a list"]),
]


@pytest.mark.parametrize(
    ("text", "environ", "overrides", "fragments"),
    [pytest.param(*case[1:], id=case[0]) for case in INVALID],
)
def test_invalid(
    text: str, environ: dict[str, str], overrides: dict[str, Any], fragments: list[str]
) -> None:
    with pytest.raises(ConfigError) as info:
        loads(text, environ, overrides)
    for fragment in fragments:
        assert fragment in str(info.value)


def test_all_problems_are_reported_together() -> None:
    text = toml_with("grup = 'x'\norder = 'yes'", tail="[log]\nlevl = 'debug'")
    with pytest.raises(ConfigError) as info:
        loads(text, {"LOGHUBD_CONSUMER__MAX_ATTEMPTS": "many"})
    keys = [problem.split(":")[0] for problem in info.value.problems]
    assert sorted(keys) == ["consumer.grup", "consumer.max_attempts", "consumer.order", "log.levl"]


def test_range_problems_of_all_sections_together() -> None:
    text = toml_with("timeout = 1", tail="[ops]\nlisten = 'x'")
    with pytest.raises(ConfigError) as info:
        loads(text.replace("http://", ""), {})
    keys = {problem.split(":")[0] for problem in info.value.problems}
    assert keys >= {"source.endpoint", "consumer.timeout", "ops.listen"}


def test_mistyped_secret_is_not_echoed() -> None:
    text = BASE.replace(
        "[consumer]", "access_key_id = 'id'\naccess_key_secret = 987654\n[consumer]"
    )
    with pytest.raises(ConfigError, match=r"source\.access_key_secret: expected a string") as info:
        loads(text, {})
    assert "987654" not in str(info.value)


PROCESSORS = (
    BASE
    + """
[processor]
name = "jsonl"

[processor.jsonl]
path = "/a"
tag = "t"
rotate = true
fields = ["a", "b"]

[processor.jsonl.sink]
mode = "append"

[processor.spark]
master = "local[*]"

[processor.empty]
"""
)


def test_processor_tables_pass_through() -> None:
    cfg = loads(PROCESSORS, {})
    assert set(cfg.processor.options) == {"jsonl", "spark", "empty"}
    assert cfg.processor.options["spark"] == {"master": "local[*]"}
    assert cfg.processor.options["empty"] == {}
    selected = cfg.processor.selected_options
    assert selected["path"] == "/a"
    assert selected["rotate"] is True
    assert selected["fields"] == ("a", "b")
    assert selected["sink"]["mode"] == "append"


def test_processor_tables_are_read_only() -> None:
    selected = loads(PROCESSORS, {}).processor.selected_options
    with pytest.raises(TypeError):
        selected["path"] = "/b"  # type: ignore[index]
    with pytest.raises(TypeError):
        selected["sink"]["mode"] = "x"


def test_selected_processor_without_a_table() -> None:
    cfg = loads(PROCESSORS, {"LOGHUBD_PROCESSOR__NAME": "other"})
    assert cfg.processor.name == "other"
    assert cfg.processor.selected_options == {}


def test_processor_env_and_overrides() -> None:
    environ = {
        "LOGHUBD_PROCESSOR_JSONL__PATH": "/x",  # replaces the file's value
        "LOGHUBD_PROCESSOR_JSONL__BATCH": "10",  # a TOML literal: int
        "LOGHUBD_PROCESSOR_JSONL__TAG": "123",  # the file has a string: stays a string
        "LOGHUBD_PROCESSOR_JSONL__LABELS": '["x", "y"]',
        "LOGHUBD_PROCESSOR_JSONL__SINK__MODE": "overwrite",
        "LOGHUBD_PROCESSOR__SPARK__MASTER": "spark://h:7077",  # the double-underscore form
        "LOGHUBD_PROCESSOR_NEW__FLAG": "true",  # a table only the environment has
    }
    cfg = loads(PROCESSORS, environ, {"processor.spark.app_name": "n"})
    jsonl = cfg.processor.options["jsonl"]
    assert jsonl["path"] == "/x"
    assert jsonl["batch"] == 10
    assert jsonl["tag"] == "123"
    assert jsonl["labels"] == ("x", "y")
    assert jsonl["sink"]["mode"] == "overwrite"
    assert cfg.processor.options["spark"] == {"master": "spark://h:7077", "app_name": "n"}
    assert cfg.processor.options["new"] == {"flag": True}


def test_redacted() -> None:
    environ = {
        "LOGHUBD_SOURCE__ACCESS_KEY_ID": "AKID",
        "LOGHUBD_SOURCE__ACCESS_KEY_SECRET": "very-secret",
        "LOGHUBD_OPS__STATUS_TOKEN": "tok",
        "LOGHUBD_PROCESSOR_SPARK__SINK_PASSWORD": "pw",
    }
    cfg = loads(PROCESSORS, environ)
    out = cfg.redacted()
    assert out["source"]["access_key_id"] == "AKID"
    assert out["source"]["access_key_secret"] == "***"
    assert out["source"]["security_token"] == ""  # empty: nothing to hide
    assert out["ops"]["status_token"] == "***"
    assert out["processor"]["name"] == "jsonl"
    assert out["processor"]["spark"] == {"master": "local[*]", "sink_password": "***"}
    assert out["processor"]["jsonl"]["fields"] == ["a", "b"]
    assert out["consumer"]["timeout"] == 15.0
    assert set(out) == {"source", "consumer", "processor", "ops", "log"}
    dumped = json.dumps(out)  # plain data, as `loghubd check-config` prints it
    assert "very-secret" not in dumped
    assert "pw" not in dumped.replace("password", "")
    assert cfg.source.access_key_secret == "very-secret"  # the config itself is untouched


def test_redacted_core_fields_are_masked_by_schema_not_by_name() -> None:
    """`credentials = "file"` and its path are not secrets though their names hold a secret
    word: only the core fields marked secret are masked, and passwords inside strings."""
    text = BASE.replace(
        'logstore = "ls"',
        'logstore = "ls"\ncredentials = "file"\ncredentials_file = "/etc/loghubd/creds.json"',
    )
    out = loads(text, {"LOGHUBD_OPS__STATUS_TOKEN": "tok"}).redacted()
    assert out["source"]["credentials"] == "file"
    assert out["source"]["credentials_file"] == "/etc/loghubd/creds.json"
    assert out["ops"]["status_token"] == "***"
    command = BASE.replace(
        'logstore = "ls"',
        'logstore = "ls"\ncredentials = "command"\n'
        'credentials_command = "vault-creds --role r --password pw"',
    )
    shown = loads(command, {}).redacted()["source"]["credentials_command"]
    assert shown == "vault-creds --role r --password ***"


def test_load_file_env_and_overrides(tmp_path: Path) -> None:
    path = tmp_path / "loghubd.toml"
    path.write_text(BASE, encoding="utf-8")
    cfg = load(path, {"LOGHUBD_CONSUMER__GROUP": "grp-x"}, {"consumer.name": "me"})
    assert (cfg.consumer.group, cfg.consumer.name) == ("grp-x", "me")
    assert load(str(path), {}).consumer.group == "grp"


def test_load_without_a_file() -> None:
    environ = {
        "LOGHUBD_SOURCE__ENDPOINT": "https://cn-hangzhou.log.aliyuncs.com",
        "LOGHUBD_SOURCE__PROJECT": "proj",
        "LOGHUBD_SOURCE__LOGSTORE": "logs",
        "LOGHUBD_CONSUMER__GROUP": "grp",
    }
    assert load(None, environ).source.endpoint == "https://cn-hangzhou.log.aliyuncs.com"


def test_load_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match=r"nope\.toml: cannot read the config file"):
        load(missing, {})


def test_load_names_the_file_on_syntax_errors(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[source\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"bad\.toml: invalid TOML"):
        load(path, {})


def test_sections_can_be_built_directly() -> None:
    assert ConsumerConfig(group="grp").timeout == 15.0
    with pytest.raises(ConfigError, match=r"consumer\.timeout"):
        ConsumerConfig(group="grp", heartbeat_interval=20.0)
    assert OpsConfig("localhost:80").port == 80
    frozen = ProcessorConfig(options={"x": {"y": [1]}})
    assert frozen.options["x"]["y"] == (1,)
    with pytest.raises(TypeError):
        frozen.options["x"]["z"] = 1  # type: ignore[index]


@pytest.mark.parametrize(
    ("listen", "warning"),
    [
        ("127.0.0.1:9464", ""),
        ("localhost:0", ""),
        ("[::1]:9464", ""),
        ("0.0.0.0:9464", ""),
        # .invalid never resolves (RFC 6761): the lookup fails whatever the resolver says
        ("nohost.invalid:9999", "ops.listen: host 'nohost.invalid' does not resolve on this "),
        ("[nohost.invalid]:9999", "ops.listen: host 'nohost.invalid' does not resolve on this "),
    ],
)
def test_ops_listen_warns_of_a_host_that_does_not_resolve(listen: str, warning: str) -> None:
    """check-config's warning: the file is valid (`run` elsewhere may resolve the host)."""
    found = loads(BASE + f'[ops]\nlisten = "{listen}"\n', {}).ops.listen_warning()
    assert found.startswith(warning) and bool(found) == bool(warning), found
    if warning:
        assert found.endswith("): loghubd run would exit 4 here"), found


def test_config_is_frozen() -> None:
    cfg = loads(BASE, {})
    with pytest.raises(AttributeError):
        cfg.consumer.group = "x"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("value", "textual", "expected"),
    [
        ("a, b,,c ", True, ("a", "b", "c")),
        ('["a", "b"]', True, ("a", "b")),
        ("", True, ()),
        (["a"], False, ("a",)),
    ],
)
def test_list_values(value: Any, textual: bool, expected: tuple[str, ...]) -> None:
    # No key is a list yet; the conversion is ready for the first one.
    assert _coerce(tuple[str, ...], value, textual) == expected


def test_none_overrides_are_skipped() -> None:
    assert loads(BASE, {}, {"consumer.group": None, "consumer.name": None}).consumer.group == "grp"


# -- several sources: [[sources]] ----------------------------------------------------------

MULTI = """
[consumer]
heartbeat_interval = 2
checkpoint_interval = 3

[processor.jsonl]
fsync = true

[[sources]]
name = "app"
endpoint = "http://127.0.0.1:7100"
project = "proj"
logstore = "app"

[sources.consumer]
group = "g-app"
shards = "0-1"

[sources.processor]
name = "jsonl"

[sources.processor.jsonl]
path = "/out/app"

[[sources]]
name = "audit-log"
endpoint = "https://cn-hangzhou.log.aliyuncs.com"
project = "proj-q"
logstore = "audit"
access_key_id = "AK"
access_key_secret = "SK"

[sources.consumer]
group = "g-audit"
heartbeat_interval = 4
end = 1714525200

[sources.processor]
name = "stdout"
"""


def source(cfg: Config, name: str) -> SourceSpec:
    [spec] = [s for s in cfg.sources if s.name == name]
    return spec


def test_single_form_is_one_source_named_default() -> None:
    cfg = loads(BASE, {})
    [spec] = cfg.sources
    assert (spec.name, cfg.multi) == ("default", False)
    assert (cfg.source, cfg.consumer, cfg.processor) == (
        spec.source,
        spec.consumer,
        spec.processor,
    )


def test_multi_sources() -> None:
    cfg = loads(MULTI, {})
    assert cfg.multi
    assert [s.name for s in cfg.sources] == ["app", "audit-log"]
    app, audit = source(cfg, "app"), source(cfg, "audit-log")
    assert (app.source.project, app.source.logstore, app.consumer.group) == ("proj", "app", "g-app")
    assert app.consumer.shards == (0, 1)
    assert app.consumer.end is None
    # Shared [consumer] keys apply unless the entry has its own; derived defaults per source.
    assert (app.consumer.heartbeat_interval, app.consumer.timeout) == (2.0, 6.0)
    assert (audit.consumer.heartbeat_interval, audit.consumer.timeout) == (4.0, 12.0)
    assert app.consumer.checkpoint_interval == audit.consumer.checkpoint_interval == 3.0
    assert audit.consumer.end == 1714525200.0
    assert audit.source.access_key_secret == "SK"
    # Processor tables: the entry's keys merged over the shared ones.
    assert app.processor.name == "jsonl"
    assert app.processor.selected_options == {"fsync": True, "path": "/out/app"}
    assert audit.processor.name == "stdout"
    assert cfg.source is app.source  # the first source, for code that knows only one


MULTI_VALID: list[tuple[str, dict[str, str], dict[str, Any], dict[str, Any]]] = [
    # name, environ, overrides, expected {(source, dotted attribute): value}
    (
        "env per source",
        {
            "LOGHUBD_SOURCES_AUDIT_LOG__ACCESS_KEY_SECRET": "from-env",
            "LOGHUBD_SOURCES_APP__CONSUMER__GROUP": "env-group",
            "LOGHUBD_SOURCES_APP__PROCESSOR__JSONL__PATH": "/env/app",
            "LOGHUBD_SOURCES_APP__LOGSTORE": "app2",
        },
        {},
        {
            ("audit-log", "source.access_key_secret"): "from-env",
            ("app", "consumer.group"): "env-group",
            ("app", "processor.selected_options.path"): "/env/app",
            ("app", "source.logstore"): "app2",
        },
    ),
    (
        "shared env is a default: an entry's own key wins",
        {"LOGHUBD_CONSUMER__HEARTBEAT_INTERVAL": "1"},
        {},
        {
            ("app", "consumer.heartbeat_interval"): 1.0,
            ("app", "consumer.timeout"): 3.0,
            ("audit-log", "consumer.heartbeat_interval"): 4.0,
        },
    ),
    (
        "--name applies to every source",
        {},
        {"consumer.name": "worker-1"},
        {("app", "consumer.name"): "worker-1", ("audit-log", "consumer.name"): "worker-1"},
    ),
    (
        "overrides per source",
        {},
        {"sources.app.consumer.shards": "3", "sources": {"audit-log": {"region": "r"}}},
        {("app", "consumer.shards"): (3,), ("audit-log", "source.region"): "r"},
    ),
]


@pytest.mark.parametrize(
    ("environ", "overrides", "expected"),
    [pytest.param(*case[1:], id=case[0]) for case in MULTI_VALID],
)
def test_multi_valid(
    environ: dict[str, str], overrides: dict[str, Any], expected: dict[tuple[str, str], Any]
) -> None:
    cfg = loads(MULTI, environ, overrides)
    for (name, dotted), value in expected.items():
        obj: Any = source(cfg, name)
        for part in dotted.split("."):
            obj = obj[part] if isinstance(obj, Mapping) else getattr(obj, part)
        assert obj == value, (name, dotted)


ONE_SOURCE = """
[[sources]]
name = "app"
endpoint = "http://127.0.0.1:7100"
project = "proj"
logstore = "ls"
[sources.consumer]
group = "grp"
"""

MULTI_INVALID: list[tuple[str, str, dict[str, str], list[str]]] = [
    # name, TOML, environ, fragments that must all appear in the message
    (
        "both forms",
        BASE + ONE_SOURCE,
        {},
        [
            "source.endpoint: [source] cannot be combined with [[sources]]",
            "LOGHUBD_SOURCES_<NAME>__ENDPOINT",
            "source.project: [source] cannot be combined",
        ],
    ),
    (
        "[source] env with [[sources]]",
        ONE_SOURCE,
        {"LOGHUBD_SOURCE__ENDPOINT": "http://h"},
        ["source.endpoint: [source] cannot be combined with [[sources]]", "LOGHUBD_SOURCE__END"],
    ),
    ("sources not tables", "sources = 3", {}, ["sources: expected one or more [[sources]]"]),
    ("no name", ONE_SOURCE.replace('name = "app"', ""), {}, ["sources[0].name: required"]),
    ("bad name", ONE_SOURCE.replace('"app"', '"a b"'), {}, ["sources[0].name", "'a b'"]),
    (
        "same name twice",
        ONE_SOURCE + ONE_SOURCE.replace('"ls"', '"other"'),
        {},
        ["sources.app: a source of that name"],
    ),
    (
        "same env name twice",
        ONE_SOURCE.replace('"app"', '"a-b"') + ONE_SOURCE.replace('"app"', '"a_b"'),
        {},
        ["sources.a_b: a source of that name (or env name LOGHUBD_SOURCES_A_B)"],
    ),
    (
        "env names an unknown source",
        ONE_SOURCE,
        {"LOGHUBD_SOURCES_APQ__PROJECT": "x"},
        ["sources.apq: no [[sources]] entry is named 'apq'", "LOGHUBD_SOURCES_APQ__PROJECT"],
    ),
    (
        "missing source key",
        ONE_SOURCE.replace('project = "proj"', ""),
        {},
        [
            "sources.app.project: required key is missing",
            "[[sources]] entry named 'app' or LOGHUBD_SOURCES_APP__PROJECT",
        ],
    ),
    (
        "no group anywhere",
        ONE_SOURCE.replace('group = "grp"', ""),
        {},
        ["sources.app.consumer.group: required key is missing", "[consumer]"],
    ),
    (
        "misspelt entry key",
        ONE_SOURCE.replace("endpoint", "endpont"),
        {},
        ["sources.app.endpont: unknown key (did you mean sources.app.endpoint?)"],
    ),
    (
        "misspelt consumer key",
        ONE_SOURCE + "grup = 'x'",
        {},
        ["sources.app.consumer.grup: unknown key (did you mean sources.app.consumer.group?)"],
    ),
    (
        "misspelt shared consumer key",
        "[consumer]\nheartbeat = 3\n" + ONE_SOURCE,
        {},
        ["consumer.heartbeat: unknown key"],
    ),
    (
        "a consumer name per source",
        ONE_SOURCE + "name = 'n'",
        {},
        ["sources.app.consumer.name: the consumer name is the daemon's"],
    ),
    (
        "same logstore and group twice",
        ONE_SOURCE + ONE_SOURCE.replace('"app"', '"again"'),
        {},
        ["sources.again: consumes proj/ls with group 'grp', like sources.app"],
    ),
    (
        "same logstore and group at another spelling of the endpoint",
        ONE_SOURCE
        + ONE_SOURCE.replace('"app"', '"again"').replace(
            "http://127.0.0.1:7100", "HTTP://localhost:7100/"
        ),
        {},
        ["sources.again: consumes proj/ls with group 'grp', like sources.app"],
    ),
    (
        "same region through its VPC endpoint",
        ONE_SOURCE.replace("http://127.0.0.1:7100", "https://cn-hangzhou.log.aliyuncs.com")
        + ONE_SOURCE.replace('"app"', '"again"').replace(
            "http://127.0.0.1:7100", "https://cn-hangzhou-vpc.log.aliyuncs.com"
        ),
        {},
        ["sources.again: consumes proj/ls with group 'grp', like sources.app"],
    ),
    (
        "two jsonl sources in one directory",
        ONE_SOURCE
        + ONE_SOURCE.replace('"app"', '"audit"').replace('"ls"', '"audit"')
        + "[processor.jsonl]\npath = '/tmp/loghubd-shared-out'\n",
        {},
        [
            "sources.audit.processor.jsonl.path: /tmp/loghubd-shared-out is also where "
            "sources.app writes"
        ],
    ),
    (
        "range problems name the source",
        ONE_SOURCE + "timeout = 1",
        {},
        ["sources.app.consumer.timeout: must be > sources.app.consumer.heartbeat_interval"],
    ),
    (
        "typed problems name the source",
        ONE_SOURCE.replace('endpoint = "http://', 'endpoint = "ftp://'),
        {},
        ["sources.app.endpoint: expected an http:// or https:// URL"],
    ),
    (
        "an entry's processor table given as a value",
        ONE_SOURCE + "[sources.processor]\njsonl = 3\n",
        {},
        [
            "sources.app.processor.jsonl: expected a table of the jsonl processor's options, "
            "got an integer 3"
        ],
    ),
    (
        "consumer is not a table",
        ONE_SOURCE.replace("[sources.consumer]", 'consumer = "x"\n[sources.x]'),
        {},
        ["sources.app.consumer: expected a table"],
    ),
]


@pytest.mark.parametrize(
    ("text", "environ", "fragments"),
    [pytest.param(*case[1:], id=case[0]) for case in MULTI_INVALID],
)
def test_multi_invalid(text: str, environ: dict[str, str], fragments: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        loads(text, environ)
    for fragment in fragments:
        assert fragment in str(info.value)


def test_multi_redacted() -> None:
    out = loads(MULTI, {}).redacted()
    assert set(out) == {"sources", "ops", "log"}
    app, audit = out["sources"]
    assert app["name"] == "app" and app["logstore"] == "app"
    assert app["consumer"]["group"] == "g-app" and app["consumer"]["shards"] == (0, 1)
    assert app["processor"] == {"name": "jsonl", "jsonl": {"fsync": True, "path": "/out/app"}}
    assert audit["access_key_id"] == "AK" and audit["access_key_secret"] == "***"
    assert "SK" not in json.dumps(out)


# -- credentials: static, env, file, command ----------------------------------------------

ENV_KEYS = {
    "ALIBABA_CLOUD_ACCESS_KEY_ID": "STS.env",
    "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "env-secret",
    "ALIBABA_CLOUD_SECURITY_TOKEN": "env-token",
}


def with_source(lines: str) -> str:
    """BASE with `lines` added to its [source] table."""
    return BASE.replace("[consumer]", f"{lines}\n[consumer]")


CREDENTIALS_VALID: list[tuple[str, str, dict[str, str], dict[str, Any]]] = [
    # name, [source] lines, environ, expected attributes of cfg.source
    (
        "static by default",
        "access_key_id = 'AK'\naccess_key_secret = 'SK'",
        {},
        {"credentials": "static", "access_key_id": "AK", "credentials_file": ""},
    ),
    (
        "env reads the Alibaba Cloud variables",
        "credentials = 'env'",
        ENV_KEYS,
        {
            "credentials": "env",
            "access_key_id": "STS.env",
            "access_key_secret": "env-secret",
            "security_token": "env-token",
        },
    ),
    (
        "env without a token",
        "credentials = 'env'",
        {k: v for k, v in ENV_KEYS.items() if "TOKEN" not in k},
        {"access_key_id": "STS.env", "security_token": ""},
    ),
    (
        "file",
        "credentials = 'file'\ncredentials_file = '/run/secrets/sls.json'",
        {},
        {"credentials": "file", "credentials_file": "/run/secrets/sls.json"},
    ),
    (
        "command with its timeout",
        "credentials = 'command'\ncredentials_command = 'fetch-sts --role \"a b\"'\n"
        "credentials_command_timeout = 3",
        {},
        {
            "credentials": "command",
            "credentials_command": 'fetch-sts --role "a b"',
            "credentials_command_timeout": 3.0,
        },
    ),
    (
        "command from env vars",
        "",
        {
            "LOGHUBD_SOURCE__CREDENTIALS": "command",
            "LOGHUBD_SOURCE__CREDENTIALS_COMMAND": "/usr/bin/fetch --json",
        },
        {"credentials": "command", "credentials_command": "/usr/bin/fetch --json"},
    ),
]


@pytest.mark.parametrize(
    ("lines", "environ", "expected"),
    [pytest.param(*case[1:], id=case[0]) for case in CREDENTIALS_VALID],
)
def test_credentials_valid(lines: str, environ: dict[str, str], expected: dict[str, Any]) -> None:
    cfg = loads(with_source(lines), environ)
    for key, value in expected.items():
        assert getattr(cfg.source, key) == value, key


CREDENTIALS_INVALID: list[tuple[str, str, dict[str, str], list[str]]] = [
    # name, [source] lines, environ, fragments that must all appear in the message
    (
        "file without its path",
        "credentials = 'file'",
        {},
        ['source.credentials_file: required when source.credentials is "file"'],
    ),
    (
        "command without one",
        "credentials = 'command'",
        {},
        ['source.credentials_command: required when source.credentials is "command"'],
    ),
    (
        "command of blanks",
        "credentials = 'command'\ncredentials_command = '  '",
        {},
        ["source.credentials_command: names no program"],
    ),
    (
        "command with an open quote",
        "credentials = 'command'\ncredentials_command = 'fetch \"a'",
        {},
        ["source.credentials_command: cannot be split into words: No closing quotation"],
    ),
    (
        "command timeout",
        "credentials = 'command'\ncredentials_command = 'x'\ncredentials_command_timeout = 0",
        {},
        ["source.credentials_command_timeout: must be > 0"],
    ),
    (
        "unknown provider",
        "credentials = 'vault'",
        {},
        ["source.credentials: expected one of 'static', 'env', 'file', 'command'"],
    ),
    (
        "static keys with a file",
        "credentials = 'file'\ncredentials_file = 'c.json'\naccess_key_id = 'AK'\n"
        "access_key_secret = 'SK'",
        {},
        [
            'source.access_key_id: not allowed when source.credentials is "file"',
            'source.access_key_secret: not allowed when source.credentials is "file"',
        ],
    ),
    (
        "a token with a command",
        "credentials = 'command'\ncredentials_command = 'x'\nsecurity_token = 'T'",
        {},
        ['source.security_token: not allowed when source.credentials is "command"'],
    ),
    (
        "a file path without the file provider",
        "credentials_file = 'c.json'",
        {},
        ['source.credentials_file: only used when source.credentials is "file"'],
    ),
    (
        "a command without the command provider",
        "credentials = 'file'\ncredentials_file = 'c.json'\ncredentials_command = 'x'",
        {},
        ['source.credentials_command: only used when source.credentials is "command"'],
    ),
    (
        "env without the variables",
        "credentials = 'env'",
        {"ALIBABA_CLOUD_ACCESS_KEY_ID": "AK"},
        [
            'source.credentials: "env" needs ALIBABA_CLOUD_ACCESS_KEY_ID and '
            "ALIBABA_CLOUD_ACCESS_KEY_SECRET in the environment"
        ],
    ),
    (
        "env with keys in the file",
        "credentials = 'env'\naccess_key_id = 'AK'",
        ENV_KEYS,
        ['source.access_key_id: not allowed when source.credentials is "env"'],
    ),
    (
        "env with a secret from LOGHUBD_ variables",
        "credentials = 'env'",
        {**ENV_KEYS, "LOGHUBD_SOURCE__ACCESS_KEY_SECRET": "x"},
        ['source.access_key_secret: not allowed when source.credentials is "env"'],
    ),
]


@pytest.mark.parametrize(
    ("lines", "environ", "fragments"),
    [pytest.param(*case[1:], id=case[0]) for case in CREDENTIALS_INVALID],
)
def test_credentials_invalid(lines: str, environ: dict[str, str], fragments: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        loads(with_source(lines), environ)
    for fragment in fragments:
        assert fragment in str(info.value)


def test_credentials_per_source() -> None:
    text = MULTI.replace(
        'logstore = "app"\n',
        'logstore = "app"\ncredentials = "command"\ncredentials_command = "fetch --app"\n',
    ).replace('access_key_id = "AK"\naccess_key_secret = "SK"\n', 'credentials = "env"\n')
    cfg = loads(text, ENV_KEYS)
    app, audit = source(cfg, "app").source, source(cfg, "audit-log").source
    assert (app.credentials, app.credentials_command) == ("command", "fetch --app")
    assert (audit.credentials, audit.access_key_id) == ("env", "STS.env")
    out = cfg.redacted()["sources"]
    assert out[1]["access_key_secret"] == "***" and out[1]["security_token"] == "***"
    assert "env-secret" not in json.dumps(out) and "env-token" not in json.dumps(out)


@pytest.mark.parametrize(
    ("entry", "environ", "fragment"),
    [
        (
            'credentials = "file"\n',
            {},
            'sources.app.credentials_file: required when sources.app.credentials is "file"',
        ),
        (
            'credentials = "env"\naccess_key_id = "AK"\n',
            ENV_KEYS,
            'sources.app.access_key_id: not allowed when sources.app.credentials is "env"',
        ),
        (
            "",
            {"LOGHUBD_SOURCES_APP__CREDENTIALS": "command"},
            'sources.app.credentials_command: required when sources.app.credentials is "command"',
        ),
        (
            'access_key_id = "AK"\n',
            {},
            "sources.app.access_key_secret: required when sources.app.access_key_id is set",
        ),
    ],
)
def test_credentials_problems_name_the_source(
    entry: str, environ: dict[str, str], fragment: str
) -> None:
    text = MULTI.replace('logstore = "app"\n', f'logstore = "app"\n{entry}')
    with pytest.raises(ConfigError) as info:
        loads(text, environ)
    assert fragment in str(info.value)
