"""Requests that are not HTTP, to a real `loghubd serve` and to a real daemon's ops listener:
each gets an SLS error body (JSON, `BadRequest`) that does not quote the request, and the
process's log stays JSON lines, without a traceback.

Before the fix aiohttp answered these itself, `text/plain`, quoting up to 100 bytes of the
offending line (an `Authorization` header included), and wrote a Python traceback to stderr
through the standard `logging` module for each ("ERROR:aiohttp.server:Error handling
request").
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from loghubd.testing import ServerProcess
from tests.integration.daemon_harness import Admin, Daemon
from tests.integration.sls_http import raw_exchange

SECRET = "TopSecretTokenValue"

# (what is sent, what the answer says of it)
MALFORMED = [
    pytest.param(
        b"GET /logstores HTTP/1.1\r\nHost: p.x\r\nAuthorization: LOG "
        + SECRET.encode() * 500
        + b"\r\n\r\n",
        "a request line or header line is too long",
        id="header line over 8 KB",
    ),
    pytest.param(
        b"GET /" + SECRET.encode() * 500 + b" HTTP/1.1\r\nHost: p.x\r\n\r\n",
        "a request line or header line is too long",
        id="request line over 8 KB",
    ),
    pytest.param(b"GARBAGE" + SECRET.encode() + b"\r\n\r\n", "invalid method", id="not HTTP"),
    # aiohttp's complaint is the request target itself, unquoted (the review's case)
    pytest.param(
        b"CONNECT " + SECRET.encode() + b"[ HTTP/1.1\r\nHost: x\r\n\r\n",
        "invalid request target",
        id="bad request target",
    ),
    pytest.param(
        b"GET / HTTP/1.1\r\nHost: p.x\r\nBad " + SECRET.encode() + b"\r\n\r\n",
        "the request could not be parsed",
        id="bad header",
    ),
    pytest.param(
        b"POST / HTTP/1.1\r\nHost: p.x\r\nTransfer-Encoding: chunked\r\n\r\n"
        + SECRET.encode()
        + b"\r\n",
        "the request could not be parsed",
        id="bad chunk size",
    ),
]


def answer_of(raw: bytes) -> tuple[int, dict[str, str], dict[str, str]]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, json.loads(body)


def check_answer(raw: bytes, says: str) -> None:
    assert raw, "no answer"
    assert SECRET.encode() not in raw, raw[:300]
    status, headers, body = answer_of(raw)
    assert status == 400, raw[:300]
    assert headers["Content-Type"].startswith("application/json"), headers
    assert body["errorCode"] == "BadRequest", body
    assert body["errorMessage"] == f"malformed HTTP request: {says}", body


def check_log(text: str) -> None:
    """Every line JSON; no traceback, no aiohttp line of its own, no piece of the request."""
    assert "Traceback" not in text
    assert "aiohttp.server" not in text
    assert SECRET not in text
    for line in text.splitlines():
        if line.strip():
            json.loads(line)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("malformed") / "data").start()
    yield proc
    proc.kill()


@pytest.mark.parametrize(("raw", "says"), MALFORMED)
def test_serve_answers_a_request_that_is_not_http_with_an_sls_error(
    server: ServerProcess, raw: bytes, says: str
) -> None:
    check_answer(raw_exchange(server.port, raw), says)
    check_log(server.log_path.read_text())


def test_serve_answers_well_formed_requests_as_before(server: ServerProcess) -> None:
    for raw, _says in (p.values for p in MALFORMED):
        raw_exchange(server.port, raw)  # type: ignore[arg-type]
    with urllib.request.urlopen(f"{server.endpoint}/", timeout=5) as resp:
        assert resp.status == 200
    assert server.proc is not None and server.proc.poll() is None
    check_log(server.log_path.read_text())


def test_the_ops_listener_answers_the_same_and_logs_one_line_per_window(
    tmp_path: Path, loghubd_server: ServerProcess
) -> None:
    Admin(loghubd_server.endpoint).create_logstore("malformed", 1)
    daemon = Daemon(tmp_path / "d", loghubd_server.endpoint, "malformed", "grp", "m1")
    daemon.config["log"]["level"] = "debug"
    daemon.start()
    try:
        daemon.wait_ready()
        for raw, says in (p.values for p in MALFORMED):
            check_answer(raw_exchange(daemon.ops_port, raw), says)  # type: ignore[arg-type]
        with urllib.request.urlopen(f"http://127.0.0.1:{daemon.ops_port}/healthz") as resp:
            assert resp.status == 200
        # six malformed requests within the window: one line, at debug level
        said = daemon.events("http_request_malformed")
        assert len(said) == 1, said
        assert said[0]["level"] == "debug" and said[0]["status"] == 400, said
        assert said[0]["client"] == "127.0.0.1"
    finally:
        assert daemon.stop() == 0
    check_log(daemon.log_path.read_text())
