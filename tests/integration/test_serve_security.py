"""A security review's findings against `loghubd serve`, each through a real server process
over HTTP. Each test failed on the code before the fix (what it got then is in its
docstring).

1. Without `--access-keys`, a web page of another site could POST (`text/plain`, no CORS
   preflight) to `http://demo.localhost:7100/...` and create logstores or put logs.
2. `--host 0.0.0.0` without `--access-keys` said no more than on loopback.
3. A deeply nested JSON body was answered 500 with a RecursionError traceback in the log.
5. The data directory and the SQLite files were made with the process umask (0755/0644).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import requests

from loghubd.protocol import signing
from loghubd.testing.process import ServerProcess
from loghubd.testing.waiting import wait_until
from tests.conftest import file_mode
from tests.integration.sls_http import RawClient, log_group

PROJECT = "demo"
EVIL = "http://evil.example"
AK, SECRET = "LTAIsecurity0001", "security-secret-0001"
KEYS = f"""
[[keys]]
id = "{AK}"
secret = "{SECRET}"
"""


def browser_post(
    server: ServerProcess, path: str, body: bytes, origin: str | None
) -> requests.Response:
    """What a web page's `fetch(url, {method: "POST", mode: "no-cors", body})` sends: a simple
    request (text/plain, no custom headers, so no preflight) with the page's Origin."""
    headers = {"Host": f"{PROJECT}.localhost:{server.port}", "Content-Type": "text/plain"}
    if origin is not None:
        headers["Origin"] = origin
    return requests.post(f"{server.endpoint}{path}", headers=headers, data=body, timeout=10)


def logstores(server: ServerProcess) -> list[str]:
    client = RawClient(server.port, PROJECT)
    try:
        names: list[str] = client.ok("GET", "/logstores").json()["logstores"]
        return names
    finally:
        client.close()


def with_app_logstore(server: ServerProcess) -> RawClient:
    """A client of `server`'s project, which it has just made with a one-shard `app`."""
    client = RawClient(server.port, PROJECT)
    client.create_project()
    client.create_logstore("app", shards=1)
    return client


def test_cross_site_requests_are_refused_without_access_keys(
    loghubd_server_factory: Callable[..., ServerProcess],
) -> None:
    """Before: 200, a logstore `pwned` made by another site's page."""
    server = loghubd_server_factory()
    with_app_logstore(server).close()
    create = json.dumps({"logstoreName": "pwned", "ttl": 1, "shardCount": 1}).encode()

    refused = [
        browser_post(server, "/logstores", create, EVIL),
        browser_post(server, "/logstores/app/shards/lb", log_group(["x"]), EVIL),
        browser_post(server, "/logstores", create, "null"),  # a sandboxed page, a file
        browser_post(server, "/logstores", create, f"http://{PROJECT}.localhost:1"),  # port
    ]

    for answer in refused:
        assert answer.status_code == 403, answer.text
        body = answer.json()
        assert body["errorCode"] == "Unauthorized"
        assert "cross-site request refused" in body["errorMessage"]
        assert "--access-keys" in body["errorMessage"]
    assert logstores(server) == ["app"]
    reader = RawClient(server.port, PROJECT)
    assert reader.pull_all("app", 0)[0] == []  # nothing was put
    reader.close()
    # One request_refused line at info for the four (throttled like every refusal).
    lines = wait_until(lambda: server.events("request_refused"), 10, "a request_refused line")
    assert [(e["level"], e["status"], e["error_code"]) for e in lines] == [
        ("info", 403, "Unauthorized")
    ]
    assert "evil.example" in lines[0]["error_message"]

    # The same origin (a page serve itself serves), and no Origin at all (the SDKs): served.
    same = browser_post(server, "/logstores", create, f"http://{PROJECT}.localhost:{server.port}")
    assert same.status_code == 200, same.text
    assert sorted(logstores(server)) == ["app", "pwned"]


def test_serves_own_console_is_not_refused(
    loghubd_server_factory: Callable[..., ServerProcess],
) -> None:
    """The console's pages are same-origin; it is routed before the API and keeps working."""
    server = loghubd_server_factory()
    page = requests.get(
        f"{server.endpoint}/console",
        headers={"Origin": server.endpoint, "Host": server.address},
        timeout=10,
    )
    assert page.status_code == 200
    assert "text/html" in page.headers["content-type"]


def test_signed_cross_site_requests_are_judged_by_their_signature(
    loghubd_server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    """With --access-keys the signature decides: a signed request with an Origin is served
    (a page cannot sign without the secret)."""
    keys = tmp_path / "keys.toml"
    keys.write_text(KEYS)
    server = loghubd_server_factory("keyed", extra_args=["--access-keys", str(keys)])
    client = RawClient(server.port, PROJECT, creds=signing.Credentials(AK, SECRET))
    client.create_project()
    answer = client.request("GET", "/logstores", headers={"Origin": EVIL})
    client.close()
    assert answer.status == 200, answer.body


def test_a_non_loopback_bind_without_access_keys_says_so_at_error_level(
    loghubd_server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    """Before: only `signatures_not_checked`, the same warning as on loopback."""
    exposed = loghubd_server_factory("exposed", extra_args=["--host", "0.0.0.0"])
    loopback = loghubd_server_factory("loopback")
    keys = tmp_path / "keys.toml"
    keys.write_text(KEYS)
    keyed = loghubd_server_factory(
        "keyed", extra_args=["--host", "0.0.0.0", "--access-keys", str(keys)]
    )

    # logged before `serving`, which start() waits for: the absence checks below are real
    lines = exposed.events("exposed_without_authentication")
    assert len(lines) == 1
    line = lines[0]
    assert line["level"] == "error"
    assert line["addresses"] == [f"0.0.0.0:{exposed.port}"]
    assert f"0.0.0.0:{exposed.port}" in line["hint"]
    assert "can read, write and delete" in line["hint"]
    assert "--access-keys" in line["hint"]
    assert exposed.events("signatures_not_checked")  # still said
    service = RawClient(exposed.port, "")
    assert service.ok("GET", "/").status == 200  # and it serves
    service.close()
    assert loopback.events("exposed_without_authentication") == []
    assert keyed.events("exposed_without_authentication") == []


def test_a_deeply_nested_json_body_is_a_400_without_a_traceback(
    loghubd_server_factory: Callable[..., ServerProcess],
) -> None:
    """Before: 500 InternalServerError, and a RecursionError traceback in the log."""
    server = loghubd_server_factory()
    client = with_app_logstore(server)
    nested = b"[" * 200_000 + b"]" * 200_000
    answer = client.request(
        "POST",
        "/logstores",
        body=nested,
        host=f"{PROJECT}.127.0.0.1",
        headers={"Content-Type": "application/json"},
    )
    deep_object = client.request(
        "PUT", "/logstores/app", body=b'{"a":' * 100_000 + b"1" + b"}" * 100_000
    )
    client.close()
    assert (answer.status, answer.error_code) == (400, "LogStoreInfoInvalid"), answer.body
    assert answer.json()["errorMessage"] == "body is not valid JSON: nested too deeply"
    assert deep_object.status == 400, deep_object.body
    log = server.log_path.read_text()
    assert "RecursionError" not in log
    assert "Traceback" not in log
    assert server.events("request_failed") == []


def test_a_data_dir_serve_makes_is_private_and_so_are_its_sqlite_files(
    tmp_path: Path, umask_022: None
) -> None:
    """Before: the directory 0755 and loghubd.sqlite3, -wal and -shm 0644 (umask 0022)."""
    data = tmp_path / "new" / "data"
    server = ServerProcess(data, log_path=tmp_path / "serve.log").start()
    try:
        client = with_app_logstore(server)
        assert client.put_raw("app", log_group(["x"])).status == 200
        client.close()
        assert file_mode(data) == 0o700
        assert file_mode(data.parent) == 0o755  # only the data directory itself
        db = data / "loghubd.sqlite3"
        for path in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
            assert file_mode(path) == 0o600, path
        assert file_mode(data / "console-session.key") == 0o600
        assert server.events("data_dir_open_to_others") == []
    finally:
        server.kill()


def test_an_existing_data_dir_keeps_its_mode_with_a_warning_if_others_may_enter(
    tmp_path: Path, umask_022: None
) -> None:
    """Before: no warning."""
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    server = ServerProcess(data).start()
    try:
        assert file_mode(data) == 0o755  # left as it was
        assert file_mode(data / "loghubd.sqlite3") == 0o600  # a new store is private all the same
        # logged before `serving`, which start() waits for (so the quiet check below is real)
        (line,) = server.events("data_dir_open_to_others")
        assert (line["level"], line["data_dir"], line["mode"]) == ("warning", str(data), "0o755")
        assert f"chmod 700 {data}" in line["hint"]
    finally:
        server.kill()
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    quiet = ServerProcess(private).start()
    try:
        assert quiet.events("data_dir_open_to_others") == []
    finally:
        quiet.kill()
