"""Connection limits of `loghubd serve` below aiohttp: how many connections may be open at
once, and how long a client may take to send a request's line and headers.

aiohttp's server has neither (its keep-alive timer is reset by every byte, so a client that
sends one header byte every few seconds holds a connection forever). `ConnectionGuard` wraps
the protocol factory aiohttp's `AppRunner` builds:

- past `max_connections` (or past `max_per_address` from one client, when that is set: an
  IPv4 address, or an IPv6 /64 network, `loghubd.server.addresses`) a new connection gets
  a complete `503 ServerBusy` answer (which the SLS SDKs retry) and is closed before any of
  it is read;
- a request head (from the connection's first byte, or the first byte after the previous
  request) must be complete within `header_timeout` seconds; if not, the client gets
  `408 RequestTimeout` and the connection is closed. A head is complete when its blank line
  arrives (seen here, as the bytes come, so a busy event loop does not time out a client
  that was on time) or when the application's handler starts (`head_done`); the application
  says when the request is finished (`request_done`), and whether its body was read: after
  an unread body, which aiohttp drains for up to `lingering_time`, the next head gets that
  much longer.

The time to send a body is bounded by the application (`loghubd.server.bodies`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from aiohttp import web

from loghubd.server.addresses import client_key

log = structlog.get_logger("loghubd.server")


class GuardedSite(web.TCPSite):
    """A TCP site serving a server bound beforehand (`listener`, whose protocol factory is a
    `ConnectionGuard`, so that its connections go through the guard first)."""

    def __init__(self, runner: web.AppRunner, host: str, port: int, listener: asyncio.Server):
        super().__init__(runner, host, port, reuse_address=True)
        self._listener = listener

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner
        self._server = self._listener
        await self._listener.start_serving()


def raw_error(status: int, reason: str, code: str, message: str) -> bytes:
    """A complete HTTP/1.1 SLS error answer that closes the connection."""
    body = json.dumps({"errorCode": code, "errorMessage": message}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


class ConnectionGuard:
    """Counts open connections and times request heads; see the module docstring."""

    def __init__(
        self,
        factory: Callable[[], asyncio.Protocol],
        *,
        max_connections: int,
        header_timeout: float,
        lingering_time: float = 10.0,
        max_per_address: int = 0,  # 0: no limit per client address
    ) -> None:
        self._factory = factory
        self.max_connections = max_connections
        self.max_per_address = max_per_address
        self._by_address: dict[str, int] = {}
        self.header_timeout = header_timeout
        self.lingering_time = lingering_time
        self.open = 0
        self.refused = 0
        self.head_timeouts = 0
        self._by_transport: dict[asyncio.BaseTransport, _Guarded] = {}

    def __call__(self) -> asyncio.Protocol:
        return _Guarded(self._factory(), self)

    def head_done(self, transport: Any) -> None:
        guarded = self._by_transport.get(transport)
        if guarded is not None:
            guarded.head_done()

    def request_done(self, transport: Any, *, body_read: bool) -> None:
        guarded = self._by_transport.get(transport)
        if guarded is not None:
            guarded.request_done(body_read)


GUARD = web.AppKey("guard", ConnectionGuard)


def attach(app: web.Application, guard: ConnectionGuard) -> None:
    """Have `app` (not yet set up) tell `guard` when each request's head is complete and when
    its answer is ready: outermost, around every other middleware, the console's requests
    included."""
    app[GUARD] = guard
    app.middlewares.insert(0, _guarded)


@web.middleware
async def _guarded(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    guard = request.app[GUARD]
    guard.head_done(request.transport)
    try:
        return await handler(request)
    finally:
        guard.request_done(request.transport, body_read=request.content.is_eof())


_BUSY = raw_error(503, "Service Unavailable", "ServerBusy", "too many open connections")
_SLOW_HEAD = raw_error(
    408, "Request Timeout", "RequestTimeout", "the request line and headers came too slowly"
)


class _Guarded(asyncio.Protocol):
    """One connection: aiohttp's protocol, plus the head timer and the connection count."""

    def __init__(self, inner: asyncio.Protocol, guard: ConnectionGuard) -> None:
        self._inner = inner
        self._guard = guard
        self._transport: asyncio.Transport | None = None
        self._address = ""  # the client (`addresses.client_key`), for the per-address count
        self._timer: asyncio.TimerHandle | None = None
        self._in_request = False
        self._counted = False
        self._tail = b""  # the last bytes of the head so far (a blank line may span chunks)
        self._scan = True  # look for the blank line (not in the unread body aiohttp drains)
        self._allowance = guard.header_timeout

    # -- asyncio.Protocol, delegated ----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        guard = self._guard
        peer = transport.get_extra_info("peername")
        self._address = client_key(str(peer[0])) if isinstance(peer, tuple) and peer else ""
        held = guard._by_address.get(self._address, 0)
        if guard.open >= guard.max_connections or (
            guard.max_per_address and held >= guard.max_per_address
        ):
            guard.refused += 1
            transport.write(_BUSY)
            transport.close()
            return
        guard.open += 1
        guard._by_address[self._address] = held + 1
        self._counted = True
        guard._by_transport[transport] = self
        self._arm()
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if not self._counted:
            return
        if not self._in_request:
            if self._timer is None:
                self._arm()  # the first byte of the next request on a kept-alive connection
            seen = self._tail + data if self._scan else b""
            if b"\r\n\r\n" in seen or b"\n\n" in seen:
                self.head_done()
            else:
                self._tail = seen[-3:]
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        if not self._counted:
            return None
        return self._inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._counted:
            return
        self._counted = False
        self._disarm()
        self._guard.open -= 1
        left = self._guard._by_address.get(self._address, 1) - 1
        if left > 0:
            self._guard._by_address[self._address] = left
        else:
            self._guard._by_address.pop(self._address, None)
        if self._transport is not None:
            self._guard._by_transport.pop(self._transport, None)
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    # -- the head timer ----------------------------------------------------------------------

    def head_done(self) -> None:
        self._in_request = True
        self._tail = b""
        self._disarm()

    def request_done(self, body_read: bool) -> None:
        self._in_request = False
        self._tail = b""
        self._allowance = self._guard.header_timeout
        self._scan = body_read
        if not body_read:  # aiohttp drains it first: what comes next is not yet a head
            self._allowance += self._guard.lingering_time

    def _arm(self) -> None:
        self._disarm()
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self._allowance, self._expired)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self) -> None:
        self._timer = None
        transport = self._transport
        if self._in_request or transport is None or transport.is_closing():
            return
        self._guard.head_timeouts += 1
        log.info("request_head_timeout", timeout_s=self._guard.header_timeout)
        transport.write(_SLOW_HEAD)
        transport.close()
