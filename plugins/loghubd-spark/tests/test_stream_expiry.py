"""The `loghub` source's reads when a micro-batch's log groups expired (past the logstore's
TTL) before it read them: failOnDataLoss true (the default) fails the read naming the shard,
the cursor and the option; false skips what expired and reads on from the oldest retained log
group. Against a real `loghubd serve` whose TTL "day" lasts 8 s; `read_range` is what each
Spark task runs, called here without a JVM."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from loghubd_spark.source import SyncSls
from loghubd_spark.stream import DataLost, ShardRange, StreamOptions, read_range
from spark_harness import produce, wait_until

from loghubd.protocol import cursor as cursors
from loghubd.protocol import errors as E
from loghubd.testing import ServerProcess

pytestmark = [pytest.mark.spark]

PROJECT, LOGSTORE = "expiry", "short"
TTL_DAY_S = 1.0  # one TTL day; the logstore keeps 3650 (an hour) but while the 100 expire


def _ids(options: StreamOptions, part: ShardRange) -> list[int]:
    rows: list[int] = []
    for batch in read_range(options, part):
        for contents in batch.column("contents").to_pylist():
            rows.append(int(dict(contents)["id"]))
    return rows


@pytest.fixture(scope="module")
def expired(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Shard 0 of a 1-day-TTL logstore: 100 logs written and expired, then 50 retained."""
    server = ServerProcess(
        tmp_path_factory.mktemp("ttl"),
        extra_args=["--ttl-day-seconds", str(TTL_DAY_S), "--expire-interval", "0.2"],
    )
    try:
        yield _expire(server.start())
    finally:
        server.kill()


def _expire(server: ServerProcess) -> dict[str, Any]:
    with SyncSls(server.endpoint, PROJECT, _options(server.endpoint).credentials) as sls:
        sls.call(lambda c: c.create_project())
        sls.call(lambda c: c.create_logstore(LOGSTORE, 1, ttl=3650))

        def cursor(where: str) -> str:
            return str(sls.call(lambda c: c.get_cursor(LOGSTORE, 0, where)))

        first = cursor("begin")
        produce(server.endpoint, PROJECT, LOGSTORE, 100, group_size=10)
        after_first = cursor("end")
        sls.call(lambda c: c.update_logstore(LOGSTORE, ttl=1))  # the 100 expire, nothing else
        wait_until(
            lambda: cursors.to_seq(0, cursor("begin")) >= cursors.to_seq(0, after_first),
            30,
            "the first 100 logs did not expire",
        )
        sls.call(lambda c: c.update_logstore(LOGSTORE, ttl=3650))
        produce(server.endpoint, PROJECT, LOGSTORE, 50, start=100, group_size=10)
        return {
            "endpoint": server.endpoint,
            "first": first,
            "after_first": after_first,
            "end": cursor("end"),
        }


def _options(endpoint: str, **more: str) -> StreamOptions:
    return StreamOptions.parse(
        {"endpoint": endpoint, "project": PROJECT, "logstore": LOGSTORE, **more}
    )


def test_by_default_a_read_of_expired_logs_fails_naming_the_shard_cursor_and_option(
    expired: dict[str, Any],
) -> None:
    part = ShardRange(0, expired["first"], expired["end"])
    with pytest.raises(DataLost) as failed:
        list(read_range(_options(expired["endpoint"]), part))
    message = str(failed.value)
    assert message.startswith(f"shard 0: the logs from cursor {expired['first']} expired")
    assert "failOnDataLoss to false" in message and "fail_on_data_loss = false" in message


def test_without_fail_on_data_loss_the_read_goes_on_from_the_oldest_retained_log(
    expired: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    options = _options(expired["endpoint"], failOnDataLoss="false")
    part = ShardRange(0, expired["first"], expired["end"])
    with caplog.at_level("WARNING", logger="loghubd.spark.stream"):
        assert _ids(options, part) == list(range(100, 150))  # every retained log, once
    assert any("loghub_data_lost shard=0" in r.getMessage() for r in caplog.records)
    # A range that expired whole reads as empty.
    assert _ids(options, ShardRange(0, expired["first"], expired["after_first"])) == []


def test_an_invalid_cursor_that_is_not_an_expiry_still_fails(expired: dict[str, Any]) -> None:
    """Past the end of the shard (another logstore's offsets, say): not data loss, never
    skipped, whatever failOnDataLoss says."""
    options = _options(expired["endpoint"], failOnDataLoss="false")
    beyond = ShardRange(0, cursors.from_seq(0, 10**6), cursors.from_seq(0, 10**6 + 5))
    with pytest.raises(E.InvalidCursor):
        list(read_range(options, beyond))
