"""Reading request bodies in `loghubd serve` within bounds: per body, server-wide, in time.

- A body larger than the limit is refused from its `Content-Length` at once (`413
  PostBodyTooLarge`), before any of it is read; a chunked body is cut off at the limit.
- `BodyBudget` bounds the bytes of request bodies held at once, server-wide. A request takes
  its `Content-Length` (the limit, for a chunked body) from the budget before its body is
  read and gives it back when its answer is ready; when the budget cannot cover it, it is
  answered `503 ServerBusy` without reading the body (the SLS SDKs retry that).
- The whole body must arrive within `timeout` seconds (`BodyTimeout`; the API answers `408
  RequestTimeout` and closes the connection).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from aiohttp import ClientPayloadError, web
from aiohttp.http_exceptions import HttpProcessingError

from loghubd.protocol import errors as E


class BodyBudget:
    """Bytes of request bodies being read or held, server-wide (single event loop)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.refused = 0

    def take(self, n: int) -> bool:
        if self.used + n > self.limit:
            self.refused += 1
            return False
        self.used += n
        return True

    def give(self, n: int) -> None:
        self.used -= n


class BodyTimeout(E.SlsError):
    """The body did not arrive in time: answered, then the connection is closed."""

    code = "RequestTimeout"
    status = 408


@dataclass(frozen=True, slots=True)
class BodyLimits:
    max_bytes: int  # one body on the wire
    timeout: float  # seconds for one whole body


@asynccontextmanager
async def read_body(
    request: web.BaseRequest, limits: BodyLimits, budget: BodyBudget
) -> AsyncIterator[bytes]:
    """The request's body, its bytes held in `budget` until the block ends."""
    length = request.content_length
    if length is not None and length > limits.max_bytes:
        raise E.PostBodyTooLarge(
            f"Content-Length {length} exceeds the limit of {limits.max_bytes} bytes", status=413
        )
    if not request.body_exists or length == 0:
        yield b""
        return
    want = limits.max_bytes if length is None else length
    if not budget.take(want):
        raise E.ServerBusy(
            f"the server is reading {budget.used} bytes of request bodies (limit "
            f"{budget.limit}); try again"
        )
    try:
        body = await _read(request, limits)
        yield body
    finally:
        budget.give(want)


async def _read(request: web.BaseRequest, limits: BodyLimits) -> bytes:
    chunks: list[bytes] = []
    got = 0
    try:
        async with asyncio.timeout(limits.timeout):
            while True:
                chunk = await request.content.readany()
                if not chunk:
                    break
                got += len(chunk)
                if got > limits.max_bytes:
                    raise E.PostBodyTooLarge(
                        f"body exceeds the limit of {limits.max_bytes} bytes", status=413
                    )
                chunks.append(chunk)
    except TimeoutError:
        raise BodyTimeout(
            f"the body did not arrive within {limits.timeout:g} s ({got} bytes came)"
        ) from None
    except (ConnectionResetError, EOFError, ClientPayloadError, HttpProcessingError):
        # the client went away mid-body, or its chunked framing broke
        raise E.PostBodyInvalid("the request body is incomplete: the connection was lost") from None
    if request.content_length is not None and got != request.content_length:
        raise E.PostBodyInvalid("the request body is incomplete: the connection was lost")
    return b"".join(chunks)
