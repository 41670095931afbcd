"""`loghubd.testing.BackgroundProducer` / `produce_logs`, what most end-to-end tests write
their logs with: the logs `loghubd produce` writes, read back by the official SDK (an
independent reader), an early stop, and a failure that reaches the test."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
from aliyun.log import LogClient

from loghubd.testing import BackgroundProducer, ServerProcess, produce_logs

PROJECT = "kitproduce"


def sdk_logs(client: LogClient, logstore: str) -> list[dict[str, str]]:
    """Every log of every shard, as {key: value}."""
    out: list[dict[str, str]] = []
    for shard in client.list_shards(PROJECT, logstore).get_shards_info():
        sid = shard["shardID"]
        cursor = client.get_cursor(PROJECT, logstore, sid, "begin").get_cursor()
        end = client.get_cursor(PROJECT, logstore, sid, "end").get_cursor()
        while cursor != end:
            resp = client.pull_logs(PROJECT, logstore, sid, cursor, count=100)
            for group in resp.get_loggroup_list().LogGroups:
                out.extend({c.Key: c.Value for c in log.Contents} for log in group.Logs)
            cursor = resp.get_next_cursor()
    return out


def test_writes_what_loghubd_produce_writes(
    loghubd_server: ServerProcess,
    sdk_via_proxy: Callable[[ServerProcess], str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="aliyun")
    summary = produce_logs(
        loghubd_server.endpoint, PROJECT, "plain", 250, prefix="p", start=10, group_size=40,
        create_shards=2,
    )  # fmt: skip
    assert summary["written"] == 250 and (summary["first_id"], summary["last_id"]) == (10, 259)
    produce_logs(
        loghubd_server.endpoint, PROJECT, "keyed", 90, keys=3, group_size=10, create_shards=2
    )

    client = LogClient(sdk_via_proxy(loghubd_server), "", "", source="loghubd-test")
    plain = sdk_logs(client, "plain")
    assert sorted(log["id"] for log in plain) == sorted(f"p{n}" for n in range(10, 260))
    assert all(log["msg"] == f"synthetic log {log['id'][1:]}" for log in plain)
    keyed = sdk_logs(client, "keyed")
    assert len(keyed) == 90
    for key in ("k0", "k1", "k2"):
        seqs = [int(log["seq"]) for log in keyed if log["key"] == key]
        assert sorted(seqs) == list(range(30)), (key, seqs)


def test_stop_ends_a_rate_limited_writer_early(loghubd_server: ServerProcess) -> None:
    producer = BackgroundProducer(
        loghubd_server.endpoint, PROJECT, "slow", 100_000, rate=200, group_size=10,
        create_shards=1,
    ).start()  # fmt: skip
    assert producer.running()
    producer.stop()
    assert not producer.running()
    summary = producer.wait(1)
    assert summary["interrupted"] == 1 and 0 <= summary["written"] < 100_000, summary


def test_a_failure_reaches_the_test_with_the_cause(loghubd_server: ServerProcess) -> None:
    producer = BackgroundProducer(loghubd_server.endpoint, PROJECT, "missing", 10).start()
    with pytest.raises(AssertionError, match=r"producer failed after 0 logs: .*NotExist"):
        producer.wait(60)
    with pytest.raises(AssertionError, match="producer failed after 0 logs"):
        produce_logs(loghubd_server.endpoint, "nosuchproject", "missing", 10)
