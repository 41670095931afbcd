"""Refused requests in the log of a real `loghubd serve`: the server
used to log nothing for a 401/403/404/400/413, even at `--log-level debug`, and the
`x-log-requestid` the client got appeared nowhere on the server.

Now one `request_refused` line per refusal: at info for 401/403 (the client's message is
deliberately vague), at debug for the others, with the request id the SDK reports, the
method, the path without its query, the API, status, errorCode, errorMessage and the access
key id (never the secret or the signature); identical lines are throttled. Successes log
nothing.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from aliyun.log import LogClient, LogException, LogItem, PutLogsRequest

from loghubd.testing.process import ServerProcess, free_port, log_events
from loghubd.testing.waiting import wait_until

ADMIN, ADMIN_SECRET = "LTAIaudit0000001", "audit-secret-0001"
READER, READER_SECRET = "LTAIreader000001", "reader-secret-0001"
WRONG_SECRET = "wrong-secret-0001"
PROJECT, LOGSTORE = "refused", "events"

KEYS = f"""
[[keys]]
id = "{ADMIN}"
secret = "{ADMIN_SECRET}"

[[keys]]
id = "{READER}"
secret = "{READER_SECRET}"
policy = "reader"

[[policies.reader.statements]]
effect = "Allow"
actions = ["log:GetCursorOrData", "log:ListShards"]
resources = ["*"]
"""


def refused_lines(log_path: Path) -> list[dict[str, Any]]:
    return log_events(log_path, "request_refused")


def refusal(call: Callable[[], object]) -> LogException:
    with pytest.raises(LogException) as caught:
        call()
    return caught.value


def line_of(log_path: Path, request_id: str) -> dict[str, Any]:
    def find() -> dict[str, Any] | None:
        return next((e for e in refused_lines(log_path) if e["request_id"] == request_id), None)

    found: dict[str, Any] = wait_until(find, 10, f"a request_refused line for {request_id}")
    return found


def test_auth_refusals_are_logged_at_info_with_the_request_id_and_key(
    loghubd_server_factory: Callable[..., ServerProcess],
    sdk_via_proxy: Callable[[ServerProcess], str],
    tmp_path: Path,
) -> None:
    keys = tmp_path / "keys.toml"
    keys.write_text(KEYS)
    server = loghubd_server_factory("keyed", extra_args=["--access-keys", str(keys)])
    endpoint = sdk_via_proxy(server)  # ServerProcess runs `--log-level info`
    admin = LogClient(endpoint, ADMIN, ADMIN_SECRET, source="audit")
    admin.create_project(PROJECT, "")
    admin.create_logstore(PROJECT, LOGSTORE, shard_count=1)
    admin.put_logs(PutLogsRequest(PROJECT, LOGSTORE, logitems=[LogItem(contents=[("a", "1")])]))

    wrong = LogClient(endpoint, ADMIN, WRONG_SECRET, source="audit")
    signature = refusal(lambda: wrong.get_logstore(PROJECT, LOGSTORE))
    for _ in range(5):  # identical refusals: throttled to one line per 10 s
        refusal(lambda: wrong.get_logstore(PROJECT, LOGSTORE))
    unknown = refusal(
        lambda: LogClient(endpoint, "LTAIunknown00001", "x").get_logstore(PROJECT, LOGSTORE)
    )
    reader = LogClient(endpoint, READER, READER_SECRET, source="audit")
    items = [LogItem(contents=[("a", "2")])]
    denied = refusal(lambda: reader.put_logs(PutLogsRequest(PROJECT, LOGSTORE, logitems=items)))
    missing = refusal(lambda: admin.get_logstore(PROJECT, "missing"))  # 404: debug, not shown
    begin = admin.get_begin_cursor(PROJECT, LOGSTORE, 0).get_cursor()
    assert admin.pull_logs(PROJECT, LOGSTORE, 0, begin, 10).get_log_count() == 1  # nothing

    assert (signature.resp_status, denied.resp_status, missing.resp_status) == (401, 403, 404)
    line = line_of(server.log_path, signature.get_request_id())
    assert {k: line[k] for k in line if k not in ("timestamp", "request_id")} == {
        "event": "request_refused",
        "level": "info",
        "method": "GET",
        "path": f"/logstores/{LOGSTORE}",
        "api": "GetLogStore",
        "status": 401,
        "error_code": "SignatureNotMatch",
        "error_message": "signature does not match",
        "access_key_id": ADMIN,
        "suppressed": 0,
        "suppressed_other": 0,
    }
    assert line_of(server.log_path, unknown.get_request_id())["error_code"] == (
        "InvalidAccessKeyId"
    )
    forbidden = line_of(server.log_path, denied.get_request_id())
    assert (forbidden["status"], forbidden["api"], forbidden["access_key_id"]) == (
        403,
        "PutLogs",
        READER,
    )
    assert "log:PostLogStoreLogs" in forbidden["error_message"]
    lines = refused_lines(server.log_path)
    assert [(e["status"], e["error_code"]) for e in lines] == [
        (401, "SignatureNotMatch"),
        (401, "InvalidAccessKeyId"),
        (403, "Unauthorized"),
    ]
    text = server.log_path.read_text()
    for secret in (ADMIN_SECRET, READER_SECRET, WRONG_SECRET, f"LOG {ADMIN}:"):
        assert secret not in text


@pytest.fixture
def debug_server(tmp_path: Path) -> Iterator[ServerProcess]:
    """`loghubd --log-level debug serve` (ServerProcess always starts at info)."""
    server = ServerProcess(tmp_path / "debug", port=free_port())
    cmd = [sys.executable, "-m", "loghubd", "--log-format", "json", "--log-level", "debug"]
    cmd += ["serve", "--data-dir", str(server.data_dir), "--port", str(server.port)]
    cmd += ["--max-body-bytes", "100000"]
    with open(server.log_path, "ab") as log:
        server.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: '"serving"' in server.log_path.read_text(), 15, server.log_tail)
        yield server
    finally:
        server.kill()


def test_other_refusals_are_logged_at_debug(
    debug_server: ServerProcess, sdk_via_proxy: Callable[[ServerProcess], str]
) -> None:
    client = LogClient(sdk_via_proxy(debug_server), "any-key", "any-secret", source="audit")
    client.create_project(PROJECT, "")
    client.create_logstore(PROJECT, LOGSTORE, shard_count=1)
    client.put_logs(PutLogsRequest(PROJECT, LOGSTORE, logitems=[LogItem(contents=[("a", "1")])]))
    missing = refusal(lambda: client.get_logstore(PROJECT, "missing"))
    bad_cursor = refusal(lambda: client.pull_logs(PROJECT, LOGSTORE, 0, "bm90LWEtY3Vyc29y", 10))
    too_large = requests.post(  # past --max-body-bytes + 1 MiB: 413 before the body is read
        f"http://127.0.0.1:{debug_server.port}/logstores/{LOGSTORE}/shards/lb",
        headers={"Host": f"{PROJECT}.sls.local", "x-log-apiversion": "0.6.0"},
        data=b"x" * (100_000 + 1024 * 1024 + 1),
        timeout=30,
    )
    assert too_large.status_code == 413

    got = {
        rid: line_of(debug_server.log_path, rid)
        for rid in (
            missing.get_request_id(),
            bad_cursor.get_request_id(),
            too_large.headers["x-log-requestid"],
        )
    }
    summary = [
        (e["level"], e["status"], e["error_code"], e["api"], e["path"], e["access_key_id"])
        for e in got.values()
    ]
    assert summary == [
        ("debug", 404, "LogStoreNotExist", "GetLogStore", "/logstores/missing", "any-key"),
        ("debug", 400, "InvalidCursor", "PullLogs", f"/logstores/{LOGSTORE}/shards/0", "any-key"),
        ("debug", 413, "PostBodyTooLarge", "PutLogs", f"/logstores/{LOGSTORE}/shards/lb", ""),
    ]
    assert "bm90LWEtY3Vyc29y" in got[bad_cursor.get_request_id()]["error_message"]
    assert len(refused_lines(debug_server.log_path)) == 3  # the successes logged nothing
