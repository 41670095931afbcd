"""Issue 13's findings against `loghubd serve`, each through a real server process over HTTP.

One server with an access-keys file serves the whole module (items 1-4, 6, 11, 12, 14); the
official SDK reaches a second, unsigned one through HTTP_PROXY (items 12, 13). Each test
failed on the code before the fix (the answer it got then is in its docstring).
"""

from __future__ import annotations

import base64
import json
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests
from aliyun.log import LogClient, LogException, LogItem, PutLogsRequest

from loghubd.protocol import signing
from loghubd.testing.process import ServerProcess
from tests.integration.sls_http import RawClient, log_group, raw_exchange
from tests.reliability import attack

AK, SECRET = "LTAIhardening01", "hardening-secret"
PROJECT = "demo"

KEYS = f"""
[[keys]]
id = "{AK}"
secret = "{SECRET}"
policy = "all-but-12345"

[[policies.all-but-12345.statements]]
effect = "Allow"
actions = ["*"]
resources = ["*"]

[[policies.all-but-12345.statements]]
effect = "Deny"
actions = ["log:CreateLogStore"]
resources = ["acs:log:*:*:project/{PROJECT}/logstore/12345"]
"""

JSON = {"Content-Type": "application/json"}
PB = {"Content-Type": "application/x-protobuf"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    base = tmp_path_factory.mktemp("hardening")
    keys = base / "keys.toml"
    keys.write_text(KEYS)
    proc = ServerProcess(
        base / "data", extra_args=["--access-keys", str(keys), "--max-body-bytes", "1000000"]
    ).start()
    client = RawClient(proc.port, PROJECT, creds=signing.Credentials(AK, SECRET))
    client.create_project()
    client.create_logstore("app", shards=1)
    client.close()
    yield proc
    proc.kill()


@pytest.fixture
def client(server: ServerProcess) -> Iterator[RawClient]:
    c = RawClient(server.port, PROJECT, creds=signing.Credentials(AK, SECRET))
    yield c
    c.close()


def signed_head(method: str, path: str, headers: dict[str, str], body: bytes) -> dict[str, str]:
    lower = {"x-log-apiversion": "0.6.0", **{k.lower(): v for k, v in headers.items()}}
    signing.sign_v1(signing.Credentials(AK, SECRET), method, path, {}, lower, body)
    return lower


# -- 1: a Deny bypassed with a JSON number ---------------------------------------------------


def test_a_number_for_a_name_is_refused_not_evaluated_as_star(client: RawClient) -> None:
    """Was: 200 and logstore "12345" created, past `Deny log:CreateLogStore` on it."""
    body = json.dumps({"logstoreName": 12345, "ttl": 1, "shardCount": 1}).encode()
    answer = client.request("POST", "/logstores", headers=JSON, body=body)
    assert (answer.status, answer.error_code) == (400, "ParameterInvalid"), answer.body
    as_string = json.dumps({"logstoreName": "12345", "ttl": 1, "shardCount": 1}).encode()
    answer = client.request("POST", "/logstores", headers=JSON, body=as_string)
    assert (answer.status, answer.error_code) == (403, "Unauthorized"), answer.body
    listed = client.ok("GET", "/logstores").json()["logstores"]
    assert "12345" not in listed
    for name in (12345.0, True, ["12345"], {"n": 1}, None):
        body = json.dumps({"logstoreName": name, "ttl": 1, "shardCount": 1}).encode()
        answer = client.request("POST", "/logstores", headers=JSON, body=body)
        assert (answer.status, answer.error_code) == (400, "ParameterInvalid"), name
    assert client.ok("GET", "/logstores").json()["logstores"] == ["app"]


# -- 2, 3: the signature before the body, the body's digest after ----------------------------


def test_v1_with_a_body_and_no_content_md5_is_refused(server: ServerProcess) -> None:
    """Was: 200, the body (any body) stored under a signature that did not cover it."""
    raw = log_group(["unsigned-body"])
    headers = signed_head(
        "POST", "/logstores/app/shards/lb", {**PB, "x-log-bodyrawsize": str(len(raw))}, raw
    )
    no_md5 = RawClient(server.port, PROJECT)
    for variant in ("missing", "wrong"):
        h = dict(headers)
        if variant == "missing":
            del h["content-md5"]
        else:
            h["content-md5"] = signing.content_md5(b"another body")
        # (re-signed so that only the digest is wrong, not the signature over the headers)
        h.pop("authorization")
        signing.sign_v1(
            signing.Credentials(AK, SECRET), "POST", "/logstores/app/shards/lb", {}, h, b""
        )
        if variant == "wrong":
            h["content-md5"] = signing.content_md5(b"another body")
            h.pop("authorization")
            sts = signing.v1_string_to_sign("POST", "/logstores/app/shards/lb", {}, h)
            h["authorization"] = f"LOG {AK}:{signing.v1_signature(SECRET, sts)}"
        answer = no_md5.request("POST", "/logstores/app/shards/lb", headers=h, body=raw)
        assert (answer.status, answer.error_code) == (401, "SignatureNotMatch"), variant
    no_md5.close()


def test_an_unsigned_body_is_refused_before_it_is_sent(server: ServerProcess) -> None:
    """Was: no answer until the whole declared body had been read (20 unsigned 10 MB bodies
    took the server from 47 to 269 MB before each got 401)."""
    head = (
        b"POST /logstores/app/shards/lb HTTP/1.1\r\nHost: demo.sls.local\r\n"
        b"Content-Type: application/x-protobuf\r\nContent-Length: 900000\r\n\r\n"
    )
    # The body never comes: a server waiting for it would say nothing for its body timeout
    # (120 s), so any answer within the 20 s wait proves the refusal came first; a time bound
    # on top would only add a way for load to fail the test.
    answer = raw_exchange(server.port, head, wait=20.0)
    assert answer.startswith(b"HTTP/1.1 401"), answer[:200]
    assert b"Unauthorized" in answer


# -- 4: /metrics only on the service host ----------------------------------------------------


def test_metrics_only_on_hosts_that_name_no_project(server: ServerProcess) -> None:
    """Was: `GET /metrics` with `Host: demo.sls.local` served the metrics, unsigned."""
    plain = RawClient(server.port, PROJECT)
    on_service = plain.request("GET", "/metrics", host=f"127.0.0.1:{server.port}")
    assert on_service.status == 200 and b"loghubd_server_requests_total" in on_service.body
    assert plain.request("GET", "/metrics", host="sls.local").status == 200
    on_project = plain.request("GET", "/metrics")  # Host: demo.sls.local
    assert on_project.status == 401, on_project.body
    assert b"loghubd_server" not in on_project.body
    plain.close()


# -- 6: Content-Length over the limit --------------------------------------------------------


def test_a_content_length_over_the_limit_is_answered_413_at_once(server: ServerProcess) -> None:
    """Was: never answered (the server waited for a body that was not coming)."""
    path = "/logstores/app/shards/lb"
    headers = signed_head("POST", path, {**PB, "content-md5": "0" * 32}, b"")
    head = f"POST {path} HTTP/1.1\r\nHost: demo.sls.local\r\n".encode()
    head += b"".join(f"{k}: {v}\r\n".encode() for k, v in headers.items())
    head += b"Content-Length: 50000000\r\n\r\n"
    # The body never comes: a server waiting for it would say nothing for its body timeout
    # (120 s), so any answer within the 20 s wait proves the refusal came first; a time bound
    # on top would only add a way for load to fail the test.
    answer = raw_exchange(server.port, head, wait=20.0)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:300]
    assert b"PostBodyTooLarge" in answer


# -- 11: a compress type SLS does not know, whitespace included ------------------------------


@pytest.mark.parametrize("ctype", ["\t", " ", "", "bogus", "lz4x"])
def test_an_unknown_or_blank_compress_type_is_refused(client: RawClient, ctype: str) -> None:
    """Was: 200 for an empty or whitespace `x-log-compresstype` (the flaky fuzz case)."""
    end = client.cursor("app", 0, "end")
    raw = log_group(["blank-ctype"])
    headers = {**PB, "x-log-bodyrawsize": str(len(raw)), "x-log-compresstype": ctype}
    answer = client.request("POST", "/logstores/app/shards/lb", headers=headers, body=raw)
    assert (answer.status, answer.error_code) == (400, "InvalidCompressType"), answer.body
    assert client.cursor("app", 0, "end") == end


# -- 12: cursors as the SDK encodes them -----------------------------------------------------


def test_a_cursor_with_the_trailing_newline_of_encodebytes_is_accepted(client: RawClient) -> None:
    """Was: 400 InvalidCursor for `MTAw...==\\n`."""
    assert client.put_raw("app", log_group(["nl-1", "nl-2"])).status == 200
    begin = client.cursor("app", 0, "begin")
    newline = base64.encodebytes(base64.b64decode(begin)).decode()
    assert newline == begin + "\n"
    pulled = client.request(
        "GET", "/logstores/app/shards/0", query={"type": "log", "cursor": newline, "count": "1"}
    )
    assert pulled.status == 200, pulled.body
    assert "\n" not in pulled.headers["x-log-cursor"]
    timed = client.request(
        "GET", "/logstores/app/shards/0", query={"type": "cursor_time", "cursor": newline}
    )
    assert timed.status == 200, timed.body
    for not_a_cursor in (begin + "\n\n", begin + " ", "\n", begin[:-1] + "\n", "eA==\n"):
        answer = client.request(
            "GET", "/logstores/app/shards/0", query={"type": "cursor_time", "cursor": not_a_cursor}
        )
        assert (answer.status, answer.error_code) == (400, "InvalidCursor"), not_a_cursor


# -- 14: unimplemented APIs ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "query", "api"),
    [
        ("GET", "/logstores/app", {"type": "log"}, "GetLogs"),
        ("GET", "/logstores/app", {"type": "histogram"}, "GetHistograms"),
        ("POST", "/logstores/app/logs", {}, "GetLogsV2"),
        ("GET", "/logstores/app/index", {}, "GetIndex"),
    ],
)
def test_an_unimplemented_api_is_named_after_the_key_check(
    server: ServerProcess,
    client: RawClient,
    method: str,
    path: str,
    query: dict[str, str],
    api: str,
) -> None:
    """Was: 200 with the logstore's description for the old GetLogs (the SDK then failed on
    a missing `x-log-progress`)."""
    answer = client.request(method, path, query=query)
    assert (answer.status, answer.error_code) == (400, "ParameterInvalid"), answer.body
    assert f"does not implement the SLS API {api}" in answer.json()["errorMessage"]
    stranger = RawClient(server.port, PROJECT, creds=signing.Credentials("LTAInobody", "x"))
    refused = stranger.request(method, path, query=query)
    assert (refused.status, refused.error_code) == (401, "InvalidAccessKeyId"), refused.body
    stranger.close()


def test_an_unknown_key_on_an_unknown_path_gets_401(server: ServerProcess) -> None:
    """Was: 400 (the path was refused before the key was checked)."""
    stranger = RawClient(server.port, PROJECT, creds=signing.Credentials("LTAInobody", "x"))
    assert stranger.request("GET", "/nothing/here").status == 401
    stranger.close()


# -- 5: the busy answer is one the SDK retries -----------------------------------------------


def test_the_sdk_retries_the_busy_answer(
    loghubd_server_factory: Callable[..., ServerProcess],
    sdk_via_proxy: Callable[[ServerProcess], str],
    tmp_path: Path,
) -> None:
    """The budget is one body; a slow client holds it until its body times out (3 s); the
    SDK's PutLogs meanwhile gets 503 ServerBusy, sleeps, retries and succeeds."""
    max_body = 1_000_000
    budget = max_body + 1024 * 1024
    server = loghubd_server_factory(
        "busy",
        extra_args=[
            "--access-keys", str(attack.keys_file(tmp_path)),
            "--max-body-bytes", str(max_body),
            "--max-inflight-body-bytes", str(budget),
            "--body-timeout", "3",
        ],
    )  # fmt: skip
    endpoint = sdk_via_proxy(server)
    client = LogClient(endpoint, attack.AK, attack.SECRET, source="loghubd-test")
    client.create_project(attack.PROJECT, "")
    client.create_logstore(attack.PROJECT, attack.LOGSTORE, shard_count=1)
    headers = attack.signed_headers(
        "POST", attack.PUT_PATH, b"",
        **{"content-type": "application/x-protobuf", "content-md5": "0" * 32},
    )  # fmt: skip
    headers["content-length"] = str(budget)
    holder = socket.create_connection(("127.0.0.1", server.port))
    holder.sendall(attack.head_bytes("POST", attack.PUT_PATH, headers) + b"\0" * 1000)
    time.sleep(0.5)  # the server has taken the whole budget for it
    started = time.monotonic()
    try:
        items = [LogItem(contents=[("id", str(i))]) for i in range(10)]
        client.put_logs(PutLogsRequest(attack.PROJECT, attack.LOGSTORE, logitems=items))
    finally:
        holder.close()
    took = time.monotonic() - started
    assert took >= 1.0, f"the put was not refused first ({took:.2f} s)"
    metrics = requests.get(f"http://127.0.0.1:{server.port}/metrics", timeout=10).text
    busy = [
        line for line in metrics.splitlines()
        if line.startswith("loghubd_server_requests_total") and 'status="503"' in line
    ]  # fmt: skip
    assert busy and float(busy[0].split()[-1]) >= 1, metrics[-2000:]
    begin = client.get_cursor(attack.PROJECT, attack.LOGSTORE, 0, "begin").get_cursor()
    pulled = client.pull_logs(attack.PROJECT, attack.LOGSTORE, 0, begin, count=10)
    assert pulled.get_log_count() == 10


# -- 12, 13: the official SDK ----------------------------------------------------------------


def test_sdk_list_project_and_previous_cursor_time(
    loghubd_server_factory: Callable[..., ServerProcess],
    sdk_via_proxy: Callable[[ServerProcess], str],
    tmp_path: Path,
) -> None:
    """Was: `list_project` 404 ProjectNotExist (`sls.local` read as project `sls`);
    `get_previous_cursor_time` and `get_check_point_fixed` at a begin cursor 400 InvalidCursor."""
    endpoint = sdk_via_proxy(loghubd_server_factory("sdk-hosts"))
    assert endpoint.startswith("sls.local:")
    client = LogClient(endpoint, "any", "any", source="loghubd-test")
    client.create_project("hosts", "")
    client.create_logstore("hosts", "ls", shard_count=1)
    names = [p["projectName"] for p in client.list_project().get_projects()]
    assert names == ["hosts"]
    client.put_logs(PutLogsRequest("hosts", "ls", logitems=[LogItem(contents=[("id", "1")])]))
    begin = client.get_cursor("hosts", "ls", 0, "begin").get_cursor()
    assert client.get_previous_cursor_time("hosts", "ls", 0, begin).get_cursor_time() > 0
    client.create_consumer_group("hosts", "ls", "cg", 30)
    client.update_check_point("hosts", "ls", "cg", 0, begin, force_success=True)
    fixed = client.get_check_point_fixed("hosts", "ls", "cg", 0)
    cps = fixed.get_consumer_group_check_points()
    assert cps[0]["checkpoint"] == begin and cps[0]["checkpoint_previous_cursor_time"] > 0
    with pytest.raises(LogException) as info:
        client.get_cursor_time("hosts", "ls", 0, "bm90IGEgY3Vyc29y\n")
    assert info.value.get_error_code() == "InvalidCursor"
