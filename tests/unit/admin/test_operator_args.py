"""The operator commands' flags as an operator types them: documented forms parse, bad values
are refused before any call, in one line naming the option, exit 2 (README "Exit codes")."""

from __future__ import annotations

import pytest

from loghubd import cli
from loghubd.admin import connect, errors, reset
from loghubd.admin.commands import join_dash_values
from loghubd.config import Config, loads
from loghubd.protocol import errors as E

# Nothing listens on port 1: a command that got past its checks would fail with exit 4.
WHERE = ["--endpoint", "http://127.0.0.1:1", "--project", "proj", "--logstore", "store"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = cli.main(list(argv))
    return code, capsys.readouterr().err


@pytest.mark.parametrize("value", ["-1h", "-90s", "-1.5h", "-2d", "+30m"])
def test_shift_by_takes_a_negative_duration_after_a_space(value: str) -> None:
    argv = ["group", "reset", "g", *WHERE, "--shift-by", value]
    args = cli.build_parser().parse_args(join_dash_values(argv))
    assert args.shift_by == value
    joined = cli.build_parser().parse_args([*argv[:-2], f"--shift-by={value}"])
    assert joined.shift_by == value


@pytest.mark.parametrize("flag", ["--shift", "--shi", "--shift-b"])
def test_an_abbreviated_shift_by_takes_a_negative_duration_too(flag: str) -> None:
    argv = ["group", "reset", "g", *WHERE, flag, "-1h"]
    assert cli.build_parser().parse_args(join_dash_values(argv)).shift_by == "-1h"


def test_an_ambiguous_abbreviation_stays_argparses_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["group", "reset", "g", *WHERE, "--sh", "-1h"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "ambiguous option: --sh=-1h could match --shift-by, --shards" in err


def test_shift_by_without_a_value_is_still_an_error_and_other_words_are_kept() -> None:
    assert join_dash_values(["--shift-by", "--execute"]) == ["--shift-by", "--execute"]
    assert join_dash_values(["--to", "-5", "--", "--shift-by", "-1h"]) == [
        "--to", "-5", "--", "--shift-by", "-1h",
    ]  # fmt: skip


def test_the_documented_shift_by_form_reaches_the_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--shift-by -1w` used to stop in argparse ("expected one argument"); now the value
    reaches the duration check, which names it."""
    code, err = run(capsys, "group", "reset", "g", *WHERE, "--shift-by", "-1w")
    assert code == 2 and "'-1w'" in err and "expected one argument" not in err, err


# --- where the keys come from, in the fix of a refusal --------------------------------------

CTX = errors.Context("http://h.example:1", "proj", "store", "grp")


def config(text: str) -> Config:
    env = {"ALIBABA_CLOUD_ACCESS_KEY_ID": "id", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "secret"}
    return loads(text, env)


SOURCE = (
    '[consumer]\ngroup = "grp"\n[source]\nendpoint = "http://127.0.0.1:1"\nproject = "proj"\n'
    'logstore = "store"\n'
)


def test_a_refused_signature_names_the_variables_that_are_read() -> None:
    got = errors.explain(E.SignatureNotMatch("x"), CTX)
    assert got is not None and got[0] == errors.FAILED
    assert "refused the credentials (SignatureNotMatch)" in got[1]
    assert "LOGHUBD_SOURCE__ACCESS_KEY_ID and LOGHUBD_SOURCE__ACCESS_KEY_SECRET" in got[1]
    assert "LOGHUBD_ACCESS_KEY_ID" not in got[1]  # the outdated name


def test_with_dash_c_a_refused_signature_names_the_file() -> None:
    origin = connect.credentials_origin(config(SOURCE), "/etc/qs.toml")
    ctx = errors.Context("http://h.example:1", "proj", "store", "grp", origin)
    got = errors.explain(E.InvalidAccessKeyId("x"), ctx)
    assert got is not None and "check the [source] of /etc/qs.toml" in got[1], got
    env = config(SOURCE + 'credentials = "env"\n')
    assert "ALIBABA_CLOUD_ACCESS_KEY_ID" in connect.credentials_origin(env, "qs.toml")
    assert connect.credentials_origin(None, None) == ""


def test_with_several_sources_a_refused_signature_names_the_sources_own_variables() -> None:
    multi = loads(
        '[[sources]]\nname = "web-app"\nendpoint = "http://h.example:1"\nproject = "proj"\n'
        'logstore = "store"\naccess_key_id = "id"\naccess_key_secret = "secret"\n'
        '[consumer]\ngroup = "grp"\n',
        environ={},
    )
    origin = connect.credentials_origin(multi, "/etc/qs.toml")
    assert origin == (
        "the [[sources]] 'web-app' of /etc/qs.toml, or LOGHUBD_SOURCES_WEB_APP__ACCESS_KEY_ID "
        "and LOGHUBD_SOURCES_WEB_APP__ACCESS_KEY_SECRET, which override it"
    )
    # ... and those are the variables the config reads.
    overridden = loads(
        '[[sources]]\nname = "web-app"\nendpoint = "http://h.example:1"\nproject = "proj"\n'
        'logstore = "store"\n[consumer]\ngroup = "grp"\n',
        environ={
            "LOGHUBD_SOURCES_WEB_APP__ACCESS_KEY_ID": "env-id",
            "LOGHUBD_SOURCES_WEB_APP__ACCESS_KEY_SECRET": "env-secret",
        },
    )
    assert overridden.sources[0].source.access_key_id == "env-id"


def test_a_permission_denial_shows_the_services_reason() -> None:
    denied = E.Unauthorized(
        "access key 'ro' may not perform log:ConsumerGroupUpdateCheckPoint on acs:log:...",
        status=403,
    )
    got = errors.explain(denied, CTX)
    assert got is not None and got[0] == errors.FAILED
    assert "may not perform log:ConsumerGroupUpdateCheckPoint" in got[1], got
    assert "refused the credentials" not in got[1]


# --- values refused before any call: one line naming the option, exit 2 ---------------------


@pytest.mark.parametrize("command", [["status", "--group", "g"], ["group", "list"],
                                     ["group", "describe", "g"], ["group", "delete", "g"],
                                     ["group", "reset", "g", "--to", "begin"]])  # fmt: skip
@pytest.mark.parametrize("timeout", ["-1", "0", "nan"])
def test_a_timeout_of_zero_or_less_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], command: list[str], timeout: str
) -> None:
    code, err = run(capsys, *command, *WHERE, "--timeout", timeout)
    assert code == 2 and "--timeout" in err and "above 0" in err, err
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("command", "missing"),
    [(["status"], "--group required"), (["group", "describe"], "GROUP required")],
)
def test_a_missing_group_is_named_as_the_command_takes_it(
    capsys: pytest.CaptureFixture[str], command: list[str], missing: str
) -> None:
    code, err = run(capsys, *command, *WHERE)
    assert code == 2 and missing in err and "(or --group)" not in err, err


@pytest.mark.parametrize(
    ("to", "words"),
    [
        ("99999999999999", "out of range"),  # was "year 3170843 is out of range", exit 1
        ("-5", "out of range"),  # was sent to the service, refused there, exit 1
        ("1969-12-31T23:59:59Z", "out of range"),
        ("inf", "not a time"),
        ("yesterday", "not a time"),
    ],
)
def test_a_reset_time_out_of_range_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], to: str, words: str
) -> None:
    code, err = run(capsys, "group", "reset", "g", *WHERE, "--to", to)
    assert code == 2 and f"--to {to!r}" in err and words in err, err
    assert len(err.splitlines()) == 1


def test_the_last_and_first_representable_times_are_accepted() -> None:
    assert reset.parse_time("0") == 0
    assert reset.parse_time("9999-12-31T23:59:59Z") == reset.LATEST
    assert (
        reset.parse_target(str(reset.LATEST), None, None)
        .describe()
        .endswith("9999-12-31T23:59:59Z")
    )


@pytest.mark.parametrize("interval", ["-1", "0"])
def test_a_watch_interval_of_zero_or_less_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], interval: str
) -> None:
    """`--interval -1` used to show the group once and end in "unexpected error" (anyio
    refuses a negative sleep), exit 1."""
    code, err = run(capsys, "status", "--group", "g", *WHERE, "--watch", "--interval", interval)
    assert code == 2 and f"--interval {interval}" in err and "above 0" in err, err


@pytest.mark.parametrize(
    ("shards", "words"),
    [
        ("1-0", "the range 1-0 is empty"),  # was an empty plan, exit 0
        ("0-", "'0-' is not a shard id or a range"),  # was read as shard 0
        ("-1", "not a shard id"),
        ("0,,2", "'' is not a shard id"),
    ],
)
def test_a_bad_shard_list_is_a_usage_error_before_any_call(
    capsys: pytest.CaptureFixture[str], shards: str, words: str
) -> None:
    code, err = run(capsys, "group", "reset", "g", *WHERE, "--to", "begin", "--shards", shards)
    assert code == 2 and f"--shards {shards!r}" in err and words in err, err


def test_shards_that_do_not_exist_are_counted_even_in_a_wide_range() -> None:
    assert reset.parse_shards("0,5-7,6", [0, 1, 5, 6, 7]) == [0, 5, 6, 7]
    with pytest.raises(reset.TargetError, match=r"no shard 2, .* and \d+ more"):
        reset.parse_shards("0-99999999", [0, 1])


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--count", "-1"), ("--rate", "-5"), ("--keys", "-1"), ("--group-size", "0"),
     ("--create-shards", "-2"), ("--progress", "-1"), ("--rate", "nan"), ("--start", "-3"),
     ("--timeout", "0"), ("--timeout", "-1"), ("--timeout", "nan")],
)  # fmt: skip
def test_produce_refuses_values_it_cannot_use(
    capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    """`--count -1` wrote nothing and exited 0; `--group-size 0` never ended. Refused before
    any call (nothing listens at WHERE's endpoint: a call would be exit 4)."""
    code, err = run(capsys, "produce", *WHERE, flag, value)
    assert code == 2 and f"{flag} {value}: must be" in err, err


def test_an_error_line_names_the_group_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run(capsys, "group", "reset", "g", *WHERE, "--to", "99999999999999")
    assert code == 2 and err.startswith("loghubd group reset: --to"), err
