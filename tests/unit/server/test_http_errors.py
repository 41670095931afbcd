"""What loghubd says of a request aiohttp could not parse: aiohttp's complaint, without the
piece of the request it quotes (which may be a credential)."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
import structlog
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st

from loghubd.server.http_errors import error_body, protocol_factory, reason

LONG = "Got more than 8190 bytes when reading"


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        # aiohttp 3.14's words, as its parsers raise them
        ("Got more than 8190 bytes when reading: b'aaaa...'.", LONG),
        ("Got more than 8190 bytes when reading: bytearray(b'/tok...')", LONG),
        ("Invalid method encountered:\n\n  b'GARBAGE'\n     ^", "Invalid method encountered"),
        ("Invalid header token:\n\n  b'Bad Header'\n       ^", "Invalid header token"),
        ("Invalid character in chunk size:\n\n  b'zz'\n    ^", "Invalid character in chunk size"),
        ("Bad status line 'x y z'", "Bad status line"),
        ("Data after `Connection: close`", "Data after `Connection"),
        ("reading b'secret'", "reading"),
        ("", "not an HTTP request"),
        (None, "not an HTTP request"),
        (": b'only the quote'", "not an HTTP request"),
    ],
)  # fmt: skip
def test_the_reason_keeps_aiohttp_s_words_and_drops_the_quote(
    message: str | None, expected: str
) -> None:
    assert reason(message, 400) == expected


@given(st.text(), st.text(min_size=1))
def test_nothing_from_the_quote_on_is_kept(before: str, quoted: str) -> None:
    for quote in (": ", "'", '"', " b'", "bytearray(b'"):
        message = before + quote + quoted
        said = reason(message, 400)
        if said != "not an HTTP request":
            assert message.strip().startswith(said)
            assert len(said) <= len(before)
        assert not any(c in said for c in ":'\"\n")


@pytest.mark.parametrize(
    ("status", "code", "text"),
    [
        (400, "BadRequest", "malformed HTTP request: Invalid header token"),
        (413, "BadRequest", "malformed HTTP request: Invalid header token"),
        (500, "InternalServerError", "internal error"),
        (504, "RequestTimeout", "internal error"),
        (503, "InternalServerError", "internal error"),
    ],
)
def test_the_error_body_is_an_sls_error(status: int, code: str, text: str) -> None:
    got_code, body = error_body(status, "Invalid header token:\n  b'x'")
    assert got_code == code
    assert json.loads(body) == {"errorCode": code, "errorMessage": text}


def test_a_handler_that_raises_past_the_app_gets_an_sls_error_and_one_line() -> None:
    """Through the factory, on a real socket: aiohttp's own 500 (a handler that raised past
    every middleware) is an SLS error body, and the log line carries the error, not a
    traceback (none without --debug)."""

    async def broken(request: web.Request) -> web.Response:
        raise RuntimeError("boom")

    async def main() -> tuple[int, str, bytes]:
        app = web.Application()
        app.router.add_get("/", broken)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        factory = protocol_factory(runner)
        await runner.setup()
        server = await asyncio.get_running_loop().create_server(factory, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            async with (
                aiohttp.ClientSession() as session,
                session.get(f"http://127.0.0.1:{port}/") as resp,
            ):
                return resp.status, resp.content_type, await resp.read()
        finally:
            server.close()
            await runner.cleanup()

    with structlog.testing.capture_logs() as logs:
        status, content_type, body = asyncio.run(main())
    assert (status, content_type) == (500, "application/json")
    assert json.loads(body) == {
        "errorCode": "InternalServerError",
        "errorMessage": "internal error",
    }
    (line,) = [e for e in logs if e["event"] == "request_failed"]
    assert "RuntimeError" in line["error"] and "boom" in line["error"], line
    assert line["status"] == 500
    assert "exc_info" not in line
