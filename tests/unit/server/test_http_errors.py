"""What loghubd says of a request aiohttp could not parse: words of its own, by the kind of
problem, never aiohttp's message (which may quote the request, or be the request's target)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import aiohttp
import pytest
import structlog
from aiohttp import http_exceptions, web

from loghubd.server.http_errors import error_body, protocol_factory, reason

SECRET = "AKIDsecretValue"
LONG = "a request line or header line is too long"


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        # what aiohttp's parsers raise, each with the request's bytes in its message
        (http_exceptions.LineTooLong(SECRET.encode(), "8190"), LONG),
        (http_exceptions.InvalidURLError(SECRET + "["), "invalid request target"),
        (http_exceptions.BadHttpMethod(SECRET), "invalid method"),
        (http_exceptions.BadStatusLine(SECRET), "invalid request line"),
        (http_exceptions.InvalidHeader(SECRET), "invalid header"),
        (http_exceptions.TransferEncodingError(SECRET), "invalid chunked body"),
        (http_exceptions.ContentLengthError(SECRET), "invalid Content-Length"),
        (http_exceptions.BadHttpMessage(SECRET), "the request could not be parsed"),
        (ValueError(SECRET), "the request could not be parsed"),
        (None, "the request could not be parsed"),
    ],
)  # fmt: skip
def test_the_reason_is_ours_not_the_request_s(exc: BaseException | None, expected: str) -> None:
    """The words come from the exception's type: its message may be the request's bytes (an
    invalid request target is its whole text)."""
    assert reason(exc, 400) == expected
    _code, body = error_body(400, exc)
    assert SECRET not in body.decode()


@pytest.mark.parametrize(
    ("status", "code", "text"),
    [
        (400, "BadRequest", "malformed HTTP request: invalid header"),
        (413, "BadRequest", "malformed HTTP request: invalid header"),
        (500, "InternalServerError", "internal error"),
        (504, "RequestTimeout", "request timed out"),
        (503, "InternalServerError", "internal error"),
    ],
)
def test_the_error_body_is_an_sls_error(status: int, code: str, text: str) -> None:
    got_code, body = error_body(status, http_exceptions.InvalidHeader(SECRET))
    assert got_code == code
    assert json.loads(body) == {"errorCode": code, "errorMessage": text}


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def get_once(handler: Handler) -> tuple[int, str, bytes] | None:
    """GET / once from `handler`, served through `protocol_factory` on a real socket: the
    answer's status, content type and body, or None when the connection broke."""

    async def main() -> tuple[int, str, bytes] | None:
        app = web.Application()
        app.router.add_get("/", handler)
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
        except aiohttp.ClientError:
            return None
        finally:
            server.close()
            await runner.cleanup()

    return asyncio.run(main())


def test_a_handler_that_raises_past_the_app_gets_an_sls_error_and_one_line() -> None:
    """aiohttp's own 500 (a handler that raised past every middleware) is an SLS error body,
    and the log line carries the error, not a traceback (none without --debug)."""

    async def broken(request: web.Request) -> web.Response:
        raise RuntimeError("boom")

    with structlog.testing.capture_logs() as logs:
        answer = get_once(broken)
    assert answer is not None
    status, content_type, body = answer
    assert (status, content_type) == (500, "application/json")
    assert json.loads(body) == {
        "errorCode": "InternalServerError",
        "errorMessage": "internal error",
    }
    (line,) = [e for e in logs if e["event"] == "request_failed"]
    assert "RuntimeError" in line["error"] and "boom" in line["error"], line
    assert line["status"] == 500
    assert "exc_info" not in line


def test_a_handler_that_fails_after_its_answer_began_is_still_logged() -> None:
    """No error answer can follow part of an answer: the connection is dropped, as aiohttp
    does, and the failure is logged (the review's case: it was silent)."""

    async def streaming(request: web.Request) -> web.StreamResponse:
        answer = web.StreamResponse()
        await answer.prepare(request)
        await answer.write(b"partial")
        raise RuntimeError("boom after the head")

    with structlog.testing.capture_logs() as logs:
        get_once(streaming)
    (line,) = [e for e in logs if e["event"] == "request_failed"]
    assert "boom after the head" in line["error"], line
