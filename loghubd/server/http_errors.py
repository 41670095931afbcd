"""What aiohttp answers on its own, answered as loghubd answers everything else.

aiohttp's protocol answers two kinds of request without the application: one it cannot parse
(a header line over 8 KB, a request line or header that is not HTTP, a bad chunk size) and
one whose handler raised past every middleware. It answers those in `text/plain` (quoting
up to 100 bytes of the request, which may be a credential) and writes each with a Python
traceback to stderr through the standard `logging` module, past loghubd's JSON lines: one
request of garbage, one traceback; a stream of them, a flood.

Here those answers are JSON error bodies, as an SLS SDK expects of every error
(`{"errorCode", "errorMessage"}`: `BadRequest` for a request that is not HTTP,
`InternalServerError` for a failure), saying what kind of thing was wrong in words of its own,
never aiohttp's message (which may be the request's bytes themselves: an invalid request
target is its whole text). A request that cannot be parsed is logged at debug level
(`http_request_malformed`), at most one line per `REFUSAL_WINDOW_S` for each status (see
`RefusalThrottle`); a failure at error level (`request_failed`), its traceback only under
`--debug`.

aiohttp builds its protocol (`RequestHandler`) itself, with `__slots__` and no hook for these
answers: `protocol_factory` switches each one's class to `_Answering`, a subclass that adds
no state, only `handle_error`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable

import structlog
from aiohttp import http_exceptions, web, web_protocol
from aiohttp.web_request import BaseRequest

from loghubd.errors import describe_error
from loghubd.logging import traceback_of
from loghubd.server.refusals import RefusalThrottle

log = structlog.get_logger("loghubd.server")

_CODES = {500: "InternalServerError", 504: "RequestTimeout"}

# What was wrong, by the parser's exception (most specific first): its message is not used.
_KINDS: tuple[tuple[type[BaseException], str], ...] = (
    (http_exceptions.LineTooLong, "a request line or header line is too long"),
    (http_exceptions.InvalidURLError, "invalid request target"),
    (http_exceptions.BadHttpMethod, "invalid method"),
    (http_exceptions.BadStatusLine, "invalid request line"),
    (http_exceptions.InvalidHeader, "invalid header"),
    (http_exceptions.TransferEncodingError, "invalid chunked body"),
    (http_exceptions.ContentLengthError, "invalid Content-Length"),
    (http_exceptions.ContentEncodingError, "invalid Content-Encoding"),
)


def reason(exc: BaseException | None, status: int) -> str:
    """What was wrong with a request aiohttp could not take, in words of our own."""
    if status >= 500:
        return "request timed out" if status == 504 else "internal error"
    for kind, words in _KINDS:
        if isinstance(exc, kind):
            return words
    return "the request could not be parsed"


def error_body(status: int, exc: BaseException | None) -> tuple[str, bytes]:
    """The error code and the JSON body of an answer aiohttp gives on its own."""
    code = _CODES.get(status, "InternalServerError" if status >= 500 else "BadRequest")
    text = reason(exc, status)
    if status < 500:
        text = f"malformed HTTP request: {text}"
    return code, json.dumps({"errorCode": code, "errorMessage": text}).encode()


class _Answering(web_protocol.RequestHandler):
    __slots__ = ()
    throttle: RefusalThrottle  # a class attribute, set on the subclass each factory makes

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if request.writer.output_size > 0:  # as aiohttp: part of an answer went already
            if exc is not None:
                _log_failure(request, status, exc)
            raise ConnectionError("an answer was partly sent: no error answer can follow")
        code, body = error_body(status, exc)
        if status >= 500:
            _log_failure(request, status, exc)
        with contextlib.suppress(Exception):  # the answer matters more than its log line
            if status < 500 and log.is_enabled_for(logging.DEBUG):
                admitted = self.throttle.admit((status, code, ""))
                if admitted is not None:
                    log.debug(
                        "http_request_malformed",
                        status=status,
                        reason=reason(exc, status),
                        client=request.remote or "",
                        suppressed=admitted[0],
                    )
        answer = web.Response(status=status, body=body, content_type="application/json")
        answer.force_close()
        return answer


def _log_failure(request: BaseRequest, status: int, exc: BaseException | None) -> None:
    """The `request_failed` line; never raises (a failure here would reach aiohttp's own
    logging, traceback and all, and cost the client its answer)."""
    with contextlib.suppress(Exception):
        log.error(
            "request_failed",
            method=request.method,
            path=request.path[:200],
            status=status,
            error=describe_error(exc)[:500] if exc is not None else reason(None, status),
            **(traceback_of(exc) if exc is not None else {}),
        )


def protocol_factory(runner: web.AppRunner) -> Callable[[], asyncio.Protocol]:
    """The protocol factory to serve `runner`'s application with (once it is set up): aiohttp's
    protocol, answering as described above."""
    answering = type("Answering", (_Answering,), {"__slots__": (), "throttle": RefusalThrottle()})

    def make() -> asyncio.Protocol:
        assert runner.server is not None, "the runner is set up before connections come"
        handler = runner.server()
        handler.__class__ = answering
        return handler

    return make
