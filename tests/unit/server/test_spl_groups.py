"""SPL over stored LogGroups (loghubd/server/spl_groups.py): what a PullLogs with `query`
returns, group by group, and the line counts behind its headers."""

from __future__ import annotations

from typing import Any

from loghubd.protocol import pb
from loghubd.server import spl, spl_groups

LEVELS = ("INFO", "INFO", "INFO", "WARN", "ERROR")


def group(ids: range, *, topic: str = "app", ns: bool = True) -> bytes:
    g = pb.LogGroup(Topic=topic, Source="10.0.0.1", MachineUUID="m-1")
    g.LogTags.add(Key="host", Value="h1")
    for n in ids:
        log = g.Logs.add(Time=1_700_000_000 + n)
        if ns:
            log.Time_ns = 1000 + n
        for k, v in (("id", str(n)), ("level", LEVELS[n % 5]), ("msg", f"log {n}")):
            log.Contents.add(Key=k, Value=v)
    data: bytes = g.SerializeToString()
    return data


def run(query: str, groups: list[bytes]) -> spl_groups.Filtered:
    return spl_groups.apply(spl.compile(query), groups)


def decode(data: bytes) -> Any:
    return pb.LogGroup.FromString(data)


def contents(log: Any) -> list[tuple[str, str]]:
    return [(c.Key, c.Value) for c in log.Contents]


def test_everything_passes_unchanged() -> None:
    groups = [group(range(0, 5)), group(range(5, 10))]
    for query in ("*", "* | where id is not null"):
        out = run(query, groups)
        assert out.groups == groups  # byte for byte
        assert (out.raw_lines, out.result_lines, out.failed_lines) == (10, 10, 0)


def test_where_drops_logs_and_keeps_everything_else() -> None:
    groups = [group(range(0, 10)), group(range(10, 15)), group(range(15, 20))]
    out = run("* | where level = 'WARN' and id <> '13'", groups)
    assert (out.raw_lines, out.result_lines, out.failed_lines) == (20, 3, 0)
    assert len(out.groups) == 2  # the group holding only 13 became empty: dropped
    kept = [decode(g) for g in out.groups]
    assert [[c for c in contents(log) if c[0] == "id"] for g in kept for log in g.Logs] == [
        [("id", "3")],
        [("id", "8")],
        [("id", "18")],
    ]
    for g in kept:
        assert (g.Topic, g.Source, g.MachineUUID) == ("app", "10.0.0.1", "m-1")
        assert [(t.Key, t.Value) for t in g.LogTags] == [("host", "h1")]
        for log in g.Logs:
            n = int(contents(log)[0][1])
            assert (log.Time, log.Time_ns) == (1_700_000_000 + n, 1000 + n)


def test_nothing_matches() -> None:
    out = run("* | where level = 'FATAL'", [group(range(0, 5)), group(range(5, 10))])
    assert out.groups == []
    assert (out.raw_lines, out.result_lines, out.failed_lines) == (10, 0, 0)


def test_failed_evaluations_are_dropped_and_counted() -> None:
    # the cast is evaluated first and fails for every log
    out = run("* | where cast(level as bigint) > 0 or id = '2'", [group(range(0, 5))])
    assert (out.raw_lines, out.result_lines, out.failed_lines) == (5, 0, 5)
    # `or` short-circuits: id 2 is kept without evaluating the cast
    out = run("* | where id = '2' or cast(level as bigint) > 0", [group(range(0, 5))])
    assert (out.raw_lines, out.result_lines, out.failed_lines) == (5, 1, 4)


def test_reshaping_rebuilds_logs_from_records() -> None:
    out = run(
        "* | where level = 'ERROR' | extend n = cast(id as bigint) * 10, __time__ = 5"
        " | project-away msg",
        [group(range(0, 10))],
    )
    assert (out.raw_lines, out.result_lines, out.failed_lines) == (10, 2, 0)
    (data,) = out.groups
    g = decode(data)
    assert (g.Topic, g.Source, g.MachineUUID) == ("app", "10.0.0.1", "m-1")
    assert [(t.Key, t.Value) for t in g.LogTags] == [("host", "h1")]
    assert [(log.Time, log.Time_ns, contents(log)) for log in g.Logs] == [
        (5, 1004, [("id", "4"), ("level", "ERROR"), ("n", "40")]),
        (5, 1009, [("id", "9"), ("level", "ERROR"), ("n", "90")]),
    ]


def test_projecting_away_the_meta_fields() -> None:
    out = run("* | project id", [group(range(0, 2), ns=False)])
    g = decode(out.groups[0])
    assert not g.HasField("Topic") and not g.HasField("Source") and len(g.LogTags) == 0
    assert g.MachineUUID == "m-1"  # not addressable by SPL: kept
    assert [(log.Time, log.HasField("Time_ns"), contents(log)) for log in g.Logs] == [
        (1_700_000_000, False, [("id", "0")]),
        (1_700_000_001, False, [("id", "1")]),
    ]


def test_new_meta_values_split_a_group_into_runs() -> None:
    out = run(
        "* | extend __topic__ = level, \"__tag__:zone\" = 'z1' | project id", [group(range(0, 5))]
    )
    # project drops __topic__ and the tags again: one group
    assert len(out.groups) == 1
    out = run("* | extend __topic__ = level, \"__tag__:zone\" = 'z1'", [group(range(0, 5))])
    topics = [decode(g).Topic for g in out.groups]
    assert topics == ["INFO", "WARN", "ERROR"]  # consecutive equal topics share a group
    assert [len(decode(g).Logs) for g in out.groups] == [3, 1, 1]
    for data in out.groups:
        assert [(t.Key, t.Value) for t in decode(data).LogTags] == [("host", "h1"), ("zone", "z1")]
    assert out.result_lines == 5


def test_non_utf8_values_survive_filtering_and_reshaping() -> None:
    g = pb.LogGroupRaw(Topic="raw")
    log = g.Logs.add(Time=1_700_000_000)
    log.Contents.add(Key="id", Value=b"r1")
    log.Contents.add(Key="payload", Value=b"\xff\xfe\x80abc")
    raw = g.SerializeToString()
    out = run("* | where id = 'r1'", [raw])
    assert out.groups == [raw]
    out = run("* | where payload like '%abc' | extend k = 'v'", [raw])
    back = pb.LogGroupListRaw.FromString(pb.frame_log_groups(out.groups)).LogGroups[0]
    assert [(c.Key, c.Value) for c in back.Logs[0].Contents] == [
        ("id", b"r1"),
        ("payload", b"\xff\xfe\x80abc"),
        ("k", b"v"),
    ]
    assert back.Topic == "raw"


def test_framed_size() -> None:
    groups = [group(range(0, 3)), b"", group(range(0, 300))]
    assert spl_groups.framed_size(groups) == len(pb.frame_log_groups(groups))
    assert spl_groups.framed_size([]) == 0
