"""SPL on pull, end to end against a real `loghubd serve`: the official SDK's
`pull_logs(query=...)`, the cursor moving over data filtered to nothing, refusals with their
position over HTTP, reshaping, and a real `loghubd run` with `consumer.query` delivering only
the matching logs while its checkpoints reach the end of every shard.

The data comes from `loghubd produce` (`level` is INFO, INFO, INFO, WARN, ERROR by id % 5).
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable

import pytest
from aliyun.log import LogClient, LogException

from loghubd.protocol import compress as codec
from loghubd.protocol import cursor as cursors
from loghubd.protocol import pb
from loghubd.testing.process import ServerProcess
from tests.integration import daemon_harness as h
from tests.integration.sls_http import RawClient, log_group, split_log_group_list

LS = "events"
N = 1_000  # logs from `loghubd produce`, 10 per log group
WARN_IDS = {str(n) for n in range(N) if n % 5 == 3}
ERROR_IDS = {str(n) for n in range(N) if n % 5 == 4}


@pytest.fixture
def server(loghubd_server: ServerProcess) -> ServerProcess:
    """A server whose project `daemontest` holds LS (2 shards) with N produced logs."""
    pool = h.Pool(loghubd_server.data_dir.parent / "setup", loghubd_server.endpoint)
    try:
        pool.produce(LS, count=N, group_size=10, create_shards=2).wait()
    finally:
        pool.close()
    return loghubd_server


def sdk(server: ServerProcess, point: Callable[[ServerProcess], str]) -> LogClient:
    return LogClient(point(server), "ak-spl-tests", "secret", source="loghubd-test")


def test_sdk_pull_logs_with_a_query_returns_exactly_the_warn_logs(
    server: ServerProcess, sdk_via_proxy: Callable[[ServerProcess], str]
) -> None:
    client = sdk(server, sdk_via_proxy)
    seen: list[str] = []
    for shard in (0, 1):
        cursor = client.get_cursor(h.PROJECT, LS, shard, "begin").get_cursor()
        end = client.get_cursor(h.PROJECT, LS, shard, "end").get_cursor()
        scanned = 0
        while cursor != end:
            resp = client.pull_logs(
                h.PROJECT, LS, shard, cursor, count=7, query="* | where level = 'WARN'"
            )
            groups = resp.get_loggroup_list().LogGroups
            assert resp.get_loggroup_count() == len(groups)
            # the pre-filter figures: what was scanned, for the SDK's throttling
            assert resp.raw_log_group_count_before_query == 7 or resp.next_cursor == end
            assert resp.raw_size_before_query > resp.raw_size
            scanned += resp.raw_log_group_count_before_query
            for g in groups:
                assert g.Topic == "loghubd-produce" and g.Source == "loghubd-produce"
                for log in g.Logs:
                    fields = {c.Key: c.Value for c in log.Contents}
                    assert fields["level"] == "WARN", fields
                    assert fields["msg"] == f"synthetic log {fields['id']}"
                    seen.append(fields["id"])
            assert resp.get_next_cursor() != cursor
            cursor = resp.get_next_cursor()
        assert scanned == cursors.decode(end) - cursors.decode(
            client.get_cursor(h.PROJECT, LS, shard, "begin").get_cursor()
        )
    assert sorted(seen) == sorted(WARN_IDS)  # each exactly once


def test_a_query_matching_nothing_still_moves_the_cursor_to_the_end(
    server: ServerProcess,
    sdk_via_proxy: Callable[[ServerProcess], str],
    raw_client: Callable[..., RawClient],
) -> None:
    client = sdk(server, sdk_via_proxy)
    query = "* | where level = 'FATAL'"
    for shard in (0, 1):
        begin = client.get_cursor(h.PROJECT, LS, shard, "begin").get_cursor()
        end = client.get_cursor(h.PROJECT, LS, shard, "end").get_cursor()
        groups = cursors.decode(end) - cursors.decode(begin)
        assert groups > 0
        resp = client.pull_logs(h.PROJECT, LS, shard, begin, count=1000, query=query)
        assert resp.get_loggroup_count() == 0
        assert resp.get_next_cursor() == end
        assert resp.raw_log_group_count_before_query == groups
        # in small steps: every answer is empty, every answer moves the cursor
        cursor, steps = begin, 0
        while cursor != end:
            resp = client.pull_logs(h.PROJECT, LS, shard, cursor, count=4, query=query)
            assert resp.get_loggroup_count() == 0
            assert cursors.decode(resp.get_next_cursor()) == min(
                cursors.decode(cursor) + 4, cursors.decode(end)
            )
            cursor, steps = resp.get_next_cursor(), steps + 1
        assert steps == -(-groups // 4)
        # at the end: nothing, same cursor
        resp = client.pull_logs(h.PROJECT, LS, shard, end, query=query)
        assert (resp.get_loggroup_count(), resp.get_next_cursor()) == (0, end)

    # the raw answer: x-log-count 0, the pre-filter figures, the line counts
    raw = raw_client(server, h.PROJECT)
    begin = raw.cursor(LS, 0)
    answer = raw.ok(
        "GET",
        f"/logstores/{LS}/shards/0",
        query={
            "type": "log",
            "cursor": begin,
            "count": "1000",
            "query": query,
            "pullMode": "scan_on_stream",
        },
        headers={"Accept-Encoding": ""},
    )
    hd = answer.headers
    groups = cursors.decode(hd["x-log-cursor"]) - cursors.decode(begin)
    assert hd["x-log-cursor"] == raw.cursor(LS, 0, "end")
    assert (hd["x-log-count"], hd["x-log-bodyrawsize"], answer.body) == ("0", "0", b"")
    assert int(hd["x-log-rawdatacount"]) == groups
    assert int(hd["x-log-rawdatalines"]) == groups * 10
    assert (hd["x-log-resultlines"], hd["x-log-failedlines"]) == ("0", "0")
    assert int(hd["x-log-rawdatasize"]) > groups * 10 * 20


def test_reshaping_over_http_and_line_counts(
    server: ServerProcess, raw_client: Callable[..., RawClient]
) -> None:
    raw = raw_client(server, h.PROJECT)
    # a group whose `n` cannot be cast: those logs fail (dropped, counted)
    raw.put_raw(LS, log_group(["bad-1", "bad-2"], extra={"level": "ERROR", "msg": "x"}))
    query = (
        "* | where level = 'ERROR' | extend n = cast(id as bigint) * 2, up = upper(level)"
        ' | project id, n, up, "__tag__:none"'
    )
    ids: list[str] = []
    failed = lines = 0
    for shard in (0, 1):
        answer = raw.ok(
            "GET",
            f"/logstores/{LS}/shards/{shard}",
            query={
                "type": "log",
                "cursor": raw.cursor(LS, shard),
                "count": "1000",
                "query": query,
                "pullMode": "scan_on_stream",
            },
            headers={"Accept-Encoding": "lz4"},
        )
        hd = answer.headers
        assert hd["x-log-cursor"] == raw.cursor(LS, shard, "end")
        size = int(hd["x-log-bodyrawsize"])
        data = b""
        if size:
            assert hd["x-log-compresstype"] == "lz4"
            data = codec.decompress("lz4", answer.body, size)
        groups = split_log_group_list(data)
        assert len(groups) == int(hd["x-log-count"]) <= int(hd["x-log-rawdatacount"])
        for g in groups:
            group = pb.LogGroup.FromString(g)
            assert not group.HasField("Topic") and len(group.LogTags) == 0  # projected away
            for log in group.Logs:
                fields = [(c.Key, c.Value) for c in log.Contents]
                assert [k for k, _v in fields] == ["id", "n", "up"]
                d = dict(fields)
                assert (d["n"], d["up"]) == (str(2 * int(d["id"])), "ERROR")
                ids.append(d["id"])
        assert int(hd["x-log-resultlines"]) == sum(
            len(pb.LogGroup.FromString(g).Logs) for g in groups
        )
        failed += int(hd["x-log-failedlines"])
        lines += int(hd["x-log-rawdatalines"])
    assert sorted(ids) == sorted(ERROR_IDS)
    assert (failed, lines) == (2, N + 2)


# (statement, the text the error points at, the reason)
REFUSED = [
    ("where level = 'WARN'", "where", "a statement starts with '*'"),
    ("* | where level = 'WARN", "'WARN", "unterminated string literal"),
    ("* | parse-json msg", "parse-json", "instruction 'parse-json' is not supported"),
    ("* | where level", "level", "where needs a condition"),
    ("* | where cast(id as uuid) > 1", "uuid", "unsupported type 'uuid'"),
    ("* | extend __time__ = 'now'", "'now'", "__time__ must be assigned an integer"),
]


@pytest.mark.parametrize(("query", "marker", "reason"), REFUSED, ids=[q for q, *_ in REFUSED])
def test_refusals_get_400_with_the_position(
    server: ServerProcess,
    sdk_via_proxy: Callable[[ServerProcess], str],
    raw_client: Callable[..., RawClient],
    query: str,
    marker: str,
    reason: str,
) -> None:
    position = query.index(marker)
    raw = raw_client(server, h.PROJECT)
    answer = raw.request(
        "GET",
        f"/logstores/{LS}/shards/0",
        query={
            "type": "log",
            "cursor": raw.cursor(LS, 0),
            "count": "10",
            "query": query,
            "pullMode": "scan_on_stream",
        },
    )
    assert answer.status == 400
    assert answer.error_code == "ParameterInvalid"
    message = answer.json()["errorMessage"]
    assert f"position {position}: " in message and reason in message, message
    assert answer.headers.get("x-log-requestid")
    # the SDK surfaces the same code and message (and does not retry a 400)
    client = sdk(server, sdk_via_proxy)
    cursor = client.get_cursor(h.PROJECT, LS, 0, "begin").get_cursor()
    with pytest.raises(LogException) as info:
        client.pull_logs(h.PROJECT, LS, 0, cursor, query=query)
    assert info.value.get_error_code() == "ParameterInvalid"
    assert f"position {position}: " in info.value.get_error_message()


def test_consume_processors_are_refused(
    server: ServerProcess, raw_client: Callable[..., RawClient]
) -> None:
    raw = raw_client(server, h.PROJECT)
    answer = raw.request(
        "GET",
        f"/logstores/{LS}/shards/0",
        query={"type": "log", "cursor": raw.cursor(LS, 0), "processor": "cp-1"},
    )
    assert (answer.status, answer.error_code) == (400, "NotSupported")


# -- the daemon ---------------------------------------------------------------------------------


def committed_to_end(pool: h.Pool, logstore: str, group: str, shards: int) -> bool:
    cps = pool.admin.checkpoints(logstore, group)
    return len(cps) == shards and all(
        cp["checkpoint"] and cp["checkpoint"] == pool.admin.cursor(logstore, s, "end")
        for s, cp in cps.items()
    )


@pytest.mark.slow
def test_a_daemon_with_a_query_delivers_only_matching_logs(
    loghubd_server: ServerProcess,
    daemon_pools: Callable[[ServerProcess], h.Pool],
    raw_client: Callable[..., RawClient],
) -> None:
    pool = daemon_pools(loghubd_server)
    ls = "filtered"
    pool.admin.create_logstore(ls, 2)
    pool.produce(ls, count=N, group_size=10).wait()  # 2 ERROR logs in every group
    # then 40 groups without any ERROR: whole pulls are filtered to nothing at the end
    raw = raw_client(loghubd_server, h.PROJECT)
    for g in range(40):
        data = log_group([f"info-{g}-{i}" for i in range(5)], extra={"level": "INFO"})
        assert raw.put_raw(ls, data).status == 200

    daemon = pool.daemon(
        ls,
        "errors-only",
        "d1",
        consumer={"query": "* | where level = 'ERROR'", "max_fetch_log_groups": 10},
    ).wait_ready()
    h.wait_until(
        functools.partial(committed_to_end, pool, ls, "errors-only", 2),
        30,
        lambda: f"checkpoints {pool.admin.checkpoints(ls, 'errors-only')}\n{daemon.log_tail()}",
    )

    def metrics_settled() -> bool:
        return daemon.metric("loghubd_consumed_logs_total") == len(ERROR_IDS)

    h.wait_until(metrics_settled, 10, daemon.log_tail)
    assert daemon.metric("loghubd_filtered_logs_total") == N - len(ERROR_IDS) + 200
    for shard in ("0", "1"):
        assert daemon.metric("loghubd_filtered_logs_total", shard=shard) > 0
    assert daemon.stop() == 0, daemon.log_tail()

    records = h.read_records([daemon.output])
    assert Counter(str(r["id"]) for _s, r in records) == Counter(ERROR_IDS)
    assert {r["level"] for _s, r in records} == {"ERROR"}
    # the whole stream was read once: both shards' ends are committed, nothing failed
    assert not daemon.events("shard_failed"), daemon.log_tail()


def test_a_daemon_with_a_refused_query_is_refused_at_start_naming_the_key(
    loghubd_server: ServerProcess,
    daemon_pools: Callable[[ServerProcess], h.Pool],
) -> None:
    """The service compiles `consumer.query` once at start: a query it refuses ends `run`
    with exit 2, one line naming the key and the position, before any shard is read. (Every
    shard used to stop on its first pull, and a bounded run over an empty window ended 0
    having checked nothing: backfill audit.)"""
    pool = daemon_pools(loghubd_server)
    pool.admin.create_logstore("badquery", 2)
    pool.produce("badquery", count=100, group_size=10).wait()
    daemon = pool.daemon("badquery", "bad", "d1", consumer={"query": "* | wher level = 'x'"})
    assert daemon.wait(60) == 2, daemon.log_tail()
    text = daemon.log_path.read_text()
    assert (
        "loghubd run: cannot start: consumer.query: the service refuses the query: invalid SPL "
        "query: position 4: instruction 'wher' is not supported"
    ) in text, text
    assert "Traceback" not in text and not daemon.events("shard_started"), text
