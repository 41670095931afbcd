"""The pure parts of the operator tools: reset targets, durations, shard lists, endpoint
checks, the error lines and the describe table."""

from __future__ import annotations

import errno
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loghubd.admin import errors, reset, view
from loghubd.protocol import errors as E
from loghubd.sls import Unreachable


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("-1h", -3600), ("+30m", 1800), ("-90s", -90), ("90", 90), ("-2d", -172800), ("1.5h", 5400)],
)
def test_durations(text: str, seconds: float) -> None:
    assert reset.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "-1w", "1h30m", "ten"])
def test_bad_durations_say_what_is_accepted(text: str) -> None:
    with pytest.raises(reset.TargetError, match="-1h, \\+30m, -90s"):
        reset.parse_duration(text)


@given(st.integers(-(10**6), 10**6), st.sampled_from(["s", "m", "h", "d"]))
def test_any_whole_duration_round_trips(n: int, unit: str) -> None:
    assert reset.parse_duration(f"{n}{unit}") == n * reset._UNIT[unit]


@pytest.mark.parametrize(
    ("to", "cursor", "shift", "want"),
    [
        ("begin", None, None, reset.Target("begin")),
        ("end", None, None, reset.Target("end")),
        ("1700000000", None, None, reset.Target("time", time=1700000000)),
        ("2023-11-14T22:13:20Z", None, None, reset.Target("time", time=1700000000)),
        ("2023-11-14T22:13:20", None, None, reset.Target("time", time=1700000000)),
        (None, "MTAw", None, reset.Target("cursor", cursor="MTAw")),
        (None, None, "-1h", reset.Target("shift", shift=-3600)),
    ],
)
def test_targets(to: str | None, cursor: str | None, shift: str | None, want: reset.Target) -> None:
    assert reset.parse_target(to, cursor, shift) == want


@pytest.mark.parametrize(
    ("to", "cursor", "shift", "message"),
    [
        (None, None, None, "exactly one"),
        ("begin", "MTAw", None, "exactly one"),
        ("yesterday", None, None, "unix seconds or ISO-8601"),
        (None, "", None, "needs a cursor"),
    ],
)
def test_bad_targets(to: str | None, cursor: str | None, shift: str | None, message: str) -> None:
    with pytest.raises(reset.TargetError, match=message):
        reset.parse_target(to, cursor, shift)


def test_shard_lists() -> None:
    assert reset.parse_shards(None, [2, 0, 1]) == [0, 1, 2]
    assert reset.parse_shards("0,2-3", [0, 1, 2, 3]) == [0, 2, 3]
    with pytest.raises(reset.TargetError, match="no shard 7"):
        reset.parse_shards("7", [0, 1])
    with pytest.raises(reset.TargetError, match="ids and ranges"):
        reset.parse_shards("a", [0, 1])


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:7100", "https://cn-hangzhou.log.aliyuncs.com", "localhost:7100",
     "http://[::1]:7100", "127.0.0.1:7100"],
)  # fmt: skip
def test_endpoints_accepted(url: str) -> None:
    assert errors.check_endpoint(url) == url


@pytest.mark.parametrize("url", ["not-a-url", "ftp://x.example", "http://:80", "http://h.x:99999"])
def test_endpoints_refused(url: str) -> None:
    with pytest.raises(errors.UserError) as caught:
        errors.check_endpoint(url)
    assert caught.value.code == errors.USAGE and "http://HOST:PORT" in caught.value.message


@pytest.mark.parametrize(
    ("no_proxy", "accepted"),
    [
        ("myproj.cn-hangzhou.log.aliyuncs.com", True),  # the project's host: never proxied
        (".log.aliyuncs.com", True),
        ("other.example", False),  # the unusable proxy would be used: refused, naming it
    ],
)
def test_an_endpoints_proxy_is_checked_for_the_host_the_client_uses(
    no_proxy: str, accepted: bool
) -> None:
    """SLS requests go to `<project>.<endpoint host>`: NO_PROXY is matched against that host,
    as the client matches it, not against the endpoint's own host."""
    env = {"HTTPS_PROXY": "socks5://proxy.example:1080", "NO_PROXY": no_proxy}
    url = "https://cn-hangzhou.log.aliyuncs.com"
    if accepted:
        assert errors.check_endpoint(url, environ=env, project="myproj") == url
    else:
        with pytest.raises(errors.UserError, match="HTTPS_PROXY"):
            errors.check_endpoint(url, environ=env, project="myproj")


CTX = errors.Context("http://h.example:1", "proj", "store", "grp")


@pytest.mark.parametrize(
    ("exc", "code", "words"),
    [
        (E.ProjectNotExist("x"), errors.NOT_FOUND, "project 'proj'"),
        (E.LogStoreNotExist("x"), errors.NOT_FOUND, "logstore 'store'"),
        (E.ConsumerGroupNotExist("x"), errors.NOT_FOUND, "consumer group 'grp'"),
        (Unreachable("x"), errors.UNREACHABLE, "cannot reach http://h.example:1"),
        (
            Unreachable("x", cause="use an http:// endpoint", wrong_scheme=True),
            errors.USAGE,
            "http://h.example:1: use an http:// endpoint",
        ),
        (E.SignatureNotMatch("x"), errors.FAILED, "refused the credentials"),
        (KeyboardInterrupt(), errors.INTERRUPTED, "interrupted"),
        (OSError(errno.EADDRINUSE, "Address in use"), errors.UNREACHABLE, "in use"),
        # anyio wraps errors in exception groups: the leaf is named
        (ExceptionGroup("g", [E.ConsumerGroupNotExist("x")]), errors.NOT_FOUND, "'grp'"),
        (BaseExceptionGroup("g", [ValueError(), KeyboardInterrupt()]), errors.INTERRUPTED, ""),
    ],
)
def test_explain(exc: BaseException, code: int, words: str) -> None:
    got = errors.explain(exc, CTX)
    assert got is not None and got[0] == code and words in got[1], got


def test_unknown_errors_are_left_to_the_caller() -> None:
    assert errors.explain(ValueError("x"), CTX) is None


def test_describe_table_uses_operator_words_and_times() -> None:
    v = view.GroupView(
        project="proj",
        logstore="store",
        group="grp",
        timeout=20,
        order=False,
        consumers=[view.ConsumerRow("c1", [0], heartbeat_age=1.0, commit_age=3.0, live=True)],
        shards=[
            view.ShardRow(
                0,
                "readwrite",
                state=view.state_word("already_alloc"),
                owner="c1",
                checkpoint="MTAw",
                checkpoint_time=1700000000,
                lag_log_groups=5,
                lag_logs=500,
                lag_logs_exact=False,
                lag_seconds=75,
            ),
            view.ShardRow(
                1,
                "readonly",
                state=view.state_word("not_alloc"),
                lag_log_groups=0,
                lag_logs=0,
                lag_seconds=0,
            ),
        ],
        source="loghubd serve",
    )
    text = view.render(v)
    assert "assigned" in text and "unassigned (read-only)" in text and "already_alloc" not in text
    assert "2023-11-14T22:13:20Z" in text and "~500" in text and "1m15s" in text
    assert "none (start setting)" in text and "estimated" in text
    data = view.to_json(v)
    assert data["shards"][0]["checkpoint_at"] == "2023-11-14T22:13:20Z"
    assert data["totals"] == {
        "shards": 2, "lag_log_groups": 5, "lag_logs": 500, "lag_logs_exact": False,
        "max_lag_seconds": 75,
    }  # fmt: skip


def shard(n: int, **fields: Any) -> view.ShardRow:
    return view.ShardRow(n, "readwrite", **fields)


# (per shard: lag_log_groups, lag_logs, lag_logs_exact, lag_seconds) -> the totals' figures
@pytest.mark.parametrize(
    ("shards", "groups", "logs", "exact", "oldest"),
    [
        ([(5, 500, True, 75), (0, 0, True, 0)], 5, 500, True, 75),
        ([(5, 500, False, 75), (3, 30, True, 9)], 8, 530, False, 75),  # one estimate: ~530
        # --no-count: the lagging shard's logs are not counted, so neither is the total (it
        # said `0 logs`, exact, with a log group behind)
        ([(1, None, True, 5), (0, 0, True, 0)], 1, None, True, 5),
        ([(1, None, True, 5), (2, None, True, 7)], 3, None, True, 7),
        ([(None, 40, True, 3), (4, 40, True, 3)], None, 80, True, 3),  # cursors not numbers
        ([], None, None, True, None),
    ],
)
def test_totals_are_unknown_when_a_shard_figure_is(
    shards: list[tuple[int | None, int | None, bool, int | None]],
    groups: int | None,
    logs: int | None,
    exact: bool,
    oldest: int | None,
) -> None:
    rows = [
        shard(n, lag_log_groups=g, lag_logs=lg, lag_logs_exact=ex, lag_seconds=sec)
        for n, (g, lg, ex, sec) in enumerate(shards)
    ]
    v = view.GroupView("p", "s", "g", 20, False, [], rows)
    assert view.to_json(v)["totals"] == {
        "shards": len(shards), "lag_log_groups": groups, "lag_logs": logs,
        "lag_logs_exact": exact, "max_lag_seconds": oldest,
    }  # fmt: skip


@given(st.lists(st.none() | st.integers(0, 10**9)))
def test_a_total_is_the_whole_or_nothing(values: list[int | None]) -> None:
    total = view.known_total(values, sum)
    if values and None not in values:
        assert total == sum(v for v in values if v is not None)
    else:
        assert total is None


@pytest.mark.parametrize(
    ("logs", "exact", "words"),
    [
        ([None, 0], True, "lag 1 log groups, logs not counted,"),
        ([0, 0], True, "lag 1 log groups, 0 logs,"),
        ([100, 0], False, "lag 1 log groups, ~100 logs,"),
    ],
)
def test_the_total_line_says_when_logs_were_not_counted(
    logs: list[int | None], exact: bool, words: str
) -> None:
    rows = [
        shard(0, lag_log_groups=1, lag_logs=logs[0], lag_logs_exact=exact, lag_seconds=5),
        shard(1, lag_log_groups=0, lag_logs=logs[1], lag_seconds=0),
    ]
    text = view.render(view.GroupView("p", "s", "g", 20, False, [], rows))
    assert f"total  2 shard(s), {words}" in text, text


# (owner, next owner, last committer, source) -> the OWNER cell
@pytest.mark.parametrize(
    ("owner", "next_owner", "committed_by", "source", "cell"),
    [
        ("c1", "", "c1", "loghubd serve", "c1"),
        ("c1", "c2", "c1", "loghubd serve", "c1 -> c2"),
        # unassigned, last committed by a consumer that stopped: nobody owns it (was `c0`)
        ("", "", "c0", "loghubd serve", "-"),
        ("", "", "", "loghubd serve", "-"),
        # the standard calls do not say who owns a shard: unknown, not the last committer
        ("", "", "c0", "checkpoints", "?"),
    ],
)
def test_the_owner_column_is_the_owner_never_the_last_committer(
    owner: str, next_owner: str, committed_by: str, source: str, cell: str
) -> None:
    row = shard(0, owner=owner, next_owner=next_owner, committed_by=committed_by)
    assert view.owner_cell(row, source) == cell


@pytest.mark.parametrize(
    ("committed_by", "committed_at", "now", "cell"),
    [
        ("c0", 1000.0, 1310.0, "c0 5m10s ago"),
        ("c0", 1000.0, 0.0, "c0"),  # no `now`: no age
        ("", 1000.0, 1003.0, "(unnamed) 3s ago"),
        ("", None, 1003.0, "-"),
    ],
)
def test_the_last_committer_has_its_own_column(
    committed_by: str, committed_at: float | None, now: float, cell: str
) -> None:
    row = shard(0, committed_by=committed_by, committed_at=committed_at)
    assert view.committer_cell(row, now) == cell


def test_a_stopped_consumer_is_shown_as_last_committer_not_as_owner() -> None:
    v = view.GroupView(
        "p", "s", "g", 20, False,
        consumers=[view.ConsumerRow("vm-24510", [], commit_age=310.0, live=False)],
        shards=[shard(0, state="unassigned", checkpoint="MTAw", committed_by="vm-24510",
                      committed_at=1000.0, lag_log_groups=0, lag_logs=0, lag_seconds=0)],
        source="loghubd serve",
        now=1310.0,
    )  # fmt: skip
    header, row = view.render(v).splitlines()[-3:-1]
    assert row.split()[:3] == ["0", "unassigned", "-"]  # was `vm-24510`, in the OWNER column
    assert view.to_json(v)["shards"][0]["owner"] == ""
    assert header.endswith("LAST COMMITTED BY") and row.endswith("vm-24510 5m10s ago")


@pytest.mark.parametrize(
    ("seconds", "text"), [(None, "-"), (0, "0s"), (59.4, "59s"), (61, "1m01s"), (7260, "2h01m"),
                          (90000, "1d01h")]
)  # fmt: skip
def test_ages(seconds: float | None, text: str) -> None:
    assert view.age(seconds) == text
