"""Our SLS client sends every operation in the form the official SDK sends it.

Both clients talk to one real `loghubd serve` through a recording proxy; for each operation
the daemon and the operator tools use, the test compares what each sent: method, path, query
keys, header names (and the values that carry meaning: api version, signature method, content
type, compression, body raw size) and the keys of a JSON body. The SDK is
aliyun-log-python-sdk, unmodified, reached through HTTP_PROXY (PROTOCOL.md §2); read its
`logclient.py` for the forms (e.g. `x-log-bodyrawsize: 0` on every body-less request).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import aiohttp
import anyio
import pytest
from aliyun.log import LogClient, LogException, LogItem, PutLogsRequest

from loghubd import SlsClient, SlsError
from loghubd.protocol import pb
from loghubd.protocol.signing import Credentials
from loghubd.testing.process import ServerProcess
from tests.integration.recording_proxy import Recorded, RecordingProxy
from tests.integration.sls_http import ENDPOINT_HOST

AK, SECRET = "LTAIformstest0001", "forms-secret"
PROJECT, LOGSTORE, GROUP, CONSUMER = "formsproj", "forms", "formsgrp", "c1"

# Transport details that are the HTTP library's, not the protocol's.
TRANSPORT = {"accept-encoding", "connection", "user-agent", "content-length", "proxy-connection"}
# Headers whose value is part of the form, not just their presence.
VALUED = {
    "x-log-apiversion",
    "x-log-signaturemethod",
    "content-type",
    "x-log-compresstype",
    "accept",
}

# Creating a project or logstore (only `loghubd produce --create-shards` does): the SDK also
# sends optional settings with their defaults; ours must be a subset of its keys.
OPTIONAL_BODY_KEYS = {"CreateProject", "CreateLogStore"}

Ours = Callable[[SlsClient], Awaitable[Any]]
Sdk = Callable[[LogClient], Any]


def log_group_bytes() -> bytes:
    group = pb.LogGroup(Topic="t", Source="s")
    log = group.Logs.add(Time=int(time.time()))
    log.Contents.add(Key="id", Value="1")
    return bytes(group.SerializeToString())


def sdk_put(client: LogClient, key: str | None) -> None:
    item = LogItem(timestamp=int(time.time()), contents=[("id", "1")])
    client.put_logs(PutLogsRequest(PROJECT, LOGSTORE, "t", "s", [item], hashKey=key))


@pytest.fixture
def proxy(loghubd_server: ServerProcess) -> Iterator[RecordingProxy]:
    with RecordingProxy(loghubd_server.port) as p:
        yield p


def form(r: Recorded) -> dict[str, Any]:
    headers = {k for k in r.headers if k not in TRANSPORT and k != "host"}
    body_keys: Any = None
    if r.body and r.headers.get("content-type") == "application/json":
        data = json.loads(r.body)
        body_keys = sorted(data) if isinstance(data, dict) else type(data).__name__
    return {
        "method": r.method,
        "path": r.path,
        "query keys": sorted(r.query),
        "query type": r.query.get("type"),
        "headers": sorted(headers),
        "header values": {k: r.headers[k] for k in sorted(headers & VALUED)},
        "body-less raw size": r.headers.get("x-log-bodyrawsize") if not r.body else None,
        "body keys": body_keys,
    }


def test_every_operation_is_sent_as_the_official_sdk_sends_it(
    proxy: RecordingProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", proxy.endpoint)
    monkeypatch.setenv("http_proxy", proxy.endpoint)
    sdk = LogClient(f"{ENDPOINT_HOST}:{proxy.port}", AK, SECRET)
    raw = log_group_bytes()
    cursor_box: dict[str, str] = {}

    def cursor() -> str:
        return cursor_box["c"]

    operations: list[tuple[str, Ours, Sdk]] = [
        (
            "CreateProject",
            lambda c: c.create_project("forms"),
            lambda s: s.create_project(PROJECT, "forms"),
        ),
        (
            "CreateLogStore",
            lambda c: c.create_logstore(LOGSTORE, 2),
            lambda s: s.create_logstore(PROJECT, LOGSTORE, ttl=30, shard_count=2),
        ),
        (
            "ListShards",
            lambda c: c.list_shards(LOGSTORE),
            lambda s: s.list_shards(PROJECT, LOGSTORE),
        ),
        (
            "PutLogs (load-balanced)",
            lambda c: c.put_log_group(LOGSTORE, raw),
            lambda s: sdk_put(s, None),
        ),
        (
            "PutLogs (by hash key)",
            lambda c: c.put_log_group(LOGSTORE, raw, hash_key="0" * 32),
            lambda s: sdk_put(s, "0" * 32),
        ),
        (
            "GetCursor",
            lambda c: c.get_cursor(LOGSTORE, 0, "begin"),
            lambda s: s.get_cursor(PROJECT, LOGSTORE, 0, "begin"),
        ),
        (
            "GetCursorTime",
            lambda c: c.cursor_time(LOGSTORE, 0, cursor()),
            lambda s: s.get_cursor_time(PROJECT, LOGSTORE, 0, cursor()),
        ),
        (
            "PullLogs",
            lambda c: c.pull(LOGSTORE, 0, cursor(), 1000),
            lambda s: s.pull_logs(PROJECT, LOGSTORE, 0, cursor(), 1000),
        ),
        (
            "PullLogs (end cursor)",
            lambda c: c.pull(LOGSTORE, 0, cursor(), 1000, end_cursor=cursor()),
            lambda s: s.pull_logs(PROJECT, LOGSTORE, 0, cursor(), 1000, end_cursor=cursor()),
        ),
        (
            "PullLogs (SPL query)",
            lambda c: c.pull(LOGSTORE, 0, cursor(), 1000, query="* | where id = '1'"),
            lambda s: s.pull_logs(PROJECT, LOGSTORE, 0, cursor(), 1000, query="* | where id = '1'"),
        ),
        (
            "CreateConsumerGroup",
            lambda c: c.create_group(LOGSTORE, GROUP, 20, False),
            lambda s: s.create_consumer_group(PROJECT, LOGSTORE, GROUP, 20, False),
        ),
        (
            "ListConsumerGroup",
            lambda c: c.list_groups(LOGSTORE),
            lambda s: s.list_consumer_group(PROJECT, LOGSTORE),
        ),
        (
            "ConsumerGroupHeartBeat",
            lambda c: c.heartbeat(LOGSTORE, GROUP, CONSUMER, []),
            lambda s: s.heart_beat(PROJECT, LOGSTORE, GROUP, CONSUMER, []),
        ),
        (
            "ConsumerGroupUpdateCheckPoint",
            lambda c: c.commit(LOGSTORE, GROUP, CONSUMER, 0, cursor()),
            lambda s: s.update_check_point(
                PROJECT, LOGSTORE, GROUP, 0, cursor(), CONSUMER, force_success=False
            ),
        ),
        (
            "ConsumerGroupUpdateCheckPoint (forced, no consumer: group reset)",
            lambda c: c.commit(LOGSTORE, GROUP, "", 0, cursor(), force=True),
            lambda s: s.update_check_point(PROJECT, LOGSTORE, GROUP, 0, cursor()),
        ),
        (
            "GetCheckPoint",
            lambda c: c.checkpoints(LOGSTORE, GROUP),
            lambda s: s.get_check_point(PROJECT, LOGSTORE, GROUP),
        ),
        (
            "GetCheckPoint (one shard)",
            lambda c: c.checkpoints(LOGSTORE, GROUP, 0),
            lambda s: s.get_check_point(PROJECT, LOGSTORE, GROUP, 0),
        ),
        (
            "DeleteConsumerGroup",
            lambda c: c.delete_group(LOGSTORE, GROUP),
            lambda s: s.delete_consumer_group(PROJECT, LOGSTORE, GROUP),
        ),
    ]

    async def run_ours(fn: Ours) -> None:
        async with aiohttp.ClientSession() as session:
            client = SlsClient(session, proxy.endpoint, PROJECT, lambda: Credentials(AK, SECRET))
            try:
                result = await fn(client)
            except SlsError:  # the service's answer does not matter here, the request does
                return
            if isinstance(result, str) and "c" not in cursor_box:
                cursor_box["c"] = result

    differences = []
    for name, ours, theirs in operations:
        # Ours first (it creates what the SDK's call then finds), each call's request alone.
        proxy.take()
        anyio.run(run_ours, ours)
        mine = proxy.take()
        if name == "CreateConsumerGroup":  # the SDK's call needs the group gone again
            anyio.run(run_ours, lambda c: c.delete_group(LOGSTORE, GROUP))
            proxy.take()
        if name == "DeleteConsumerGroup":
            anyio.run(run_ours, lambda c: c.create_group(LOGSTORE, GROUP, 20, False))
            proxy.take()
        # The service's answer does not matter here, the request does.
        with contextlib.suppress(LogException):
            theirs(sdk)
        sdks = proxy.take()
        assert len(mine) == 1 and len(sdks) == 1, (name, mine, sdks)
        a, b = form(mine[0]), form(sdks[0])
        if name in OPTIONAL_BODY_KEYS and set(a["body keys"]) <= set(b["body keys"]):
            a["body keys"] = b["body keys"]  # the SDK also sends optional settings
        if a != b:
            differences.append(
                f"{name}: " + "; ".join(f"{k}: ours {a[k]} sdk {b[k]}" for k in a if a[k] != b[k])
            )
    assert not differences, "\n".join(differences)
