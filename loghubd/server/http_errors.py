"""What aiohttp answers on its own, answered as loghubd answers everything else.

aiohttp's protocol answers two kinds of request without the application: one it cannot parse
(a header line over 8 KB, a request line or header that is not HTTP, a bad chunk size) and
one whose handler raised past every middleware. It answers those in `text/plain` (quoting
up to 100 bytes of the request, which may be a credential) and writes each with a Python
traceback to stderr through the standard `logging` module, past loghubd's JSON lines: one
request of garbage, one traceback; a stream of them, a flood.

Here those answers are JSON error bodies, as an SLS SDK expects of every error
(`{"errorCode", "errorMessage"}`: `BadRequest` for a request that is not HTTP,
`InternalServerError` for a failure), naming what was wrong without echoing the request's
bytes. A request that cannot be parsed is logged at debug level
(`http_request_malformed`), at most one line per `REFUSAL_WINDOW_S` for each status (see
`RefusalThrottle`); a failure at error level (`request_failed`), its traceback only under
`--debug`.

aiohttp builds its protocol (`RequestHandler`) itself, with `__slots__` and no hook for these
answers: `protocol_factory` switches each one's class to `_Answering`, a subclass that adds
no state, only `handle_error`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Callable

import structlog
from aiohttp import web, web_protocol
from aiohttp.web_request import BaseRequest

from loghubd.errors import describe_error
from loghubd.logging import traceback_of
from loghubd.server.refusals import RefusalThrottle

log = structlog.get_logger("loghubd.server")

_CODES = {500: "InternalServerError", 504: "RequestTimeout"}
# Where aiohttp's complaint begins to quote the request: a colon, a bytes or bytearray repr,
# any quote.
_QUOTED = re.compile(r"""[:'"]|\bb'|bytearray\(""")


def reason(message: str | None, status: int) -> str:
    """aiohttp's complaint without the request's bytes it quotes: its first line, up to where
    the quote begins ("Invalid header token", "Got more than 8190 bytes when reading")."""
    first = (message or "").strip().split("\n", 1)[0]
    text = _QUOTED.split(first, 1)[0].rstrip(" .")[:200]
    if text:
        return text
    return "internal error" if status >= 500 else "not an HTTP request"


def error_body(status: int, message: str | None) -> tuple[str, bytes]:
    """The error code and the JSON body of an answer aiohttp gives on its own."""
    code = _CODES.get(status, "InternalServerError" if status >= 500 else "BadRequest")
    text = reason(message, status) if status < 500 else "internal error"
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
            raise ConnectionError("an answer was partly sent: no error answer can follow")
        code, body = error_body(status, message)
        remote = request.remote or ""
        if status >= 500:
            log.error(
                "request_failed",
                method=request.method,
                path=request.path[:200],
                status=status,
                error=describe_error(exc)[:500] if exc is not None else code,
                **(traceback_of(exc) if exc is not None else {}),
            )
        elif log.is_enabled_for(logging.DEBUG):
            admitted = self.throttle.admit((status, code, ""))
            if admitted is not None:
                log.debug(
                    "http_request_malformed",
                    status=status,
                    reason=reason(message, status),
                    client=remote,
                    suppressed=admitted[0],
                )
        answer = web.Response(status=status, body=body, content_type="application/json")
        answer.force_close()
        return answer


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
