"""A real HTTP endpoint for the `http` processor's tests and benchmark: an aiohttp server in a
thread of the test process that records every request it gets (time, headers, the ids of
the logs in its NDJSON body, and how it answered), and answers as its `script` says.

`script(n, now)` is called for the n-th request (from 0), `now` seconds after the first
request arrived, and returns the answer: an HTTP
status (with `Retry-After: <retry_after>` on 429), or `STALL` to hold the request longer than
the client waits and then answer 200 (which the client never sees).
"""

from __future__ import annotations

import asyncio
import gzip
import json
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry

from loghubd.processors.http import HttpFactory
from loghubd.testing import make_context, serve_on_loopback
from tests.integration.loop_thread import LoopThread

STALL = -1


@dataclass
class Received:
    at: float  # when the answer was sent (after the stall, for a stalled request)
    shard: int
    cursor: str
    part: str
    ids: list[str]
    status: int  # what was answered; STALL when the client had given up
    auth: str = ""
    gzip: bool = False
    client: str = ""  # the common name of the client certificate presented over TLS, if any
    target: str = ""  # the URL asked for (absolute when the receiver stands in as a proxy)
    proxy_auth: str = ""  # the Proxy-Authorization header, if any
    size: int = 0  # bytes of the NDJSON body (after gunzip)


@dataclass
class Receiver:
    script: Callable[[int, float], int] = lambda n, now: 200
    retry_after: int = 1
    stall_s: float = 3.0
    record_ids: bool = True
    port: int = 0  # the port it listens on, from `start()` (0: before)
    received: list[Received] = field(default_factory=list)
    requests: int = 0
    started: float = 0.0
    tls: ssl.SSLContext | None = None  # serve https with this server context

    @property
    def url(self) -> str:
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://127.0.0.1:{self.port}/ingest"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        n = self.requests
        self.requests += 1
        if n == 0:
            self.started = time.monotonic()
        body = await request.read()
        zipped = request.headers.get("Content-Encoding") == "gzip"
        if zipped and body[:2] == b"\x1f\x8b":  # aiohttp may have inflated it already
            body = gzip.decompress(body)
        ids: list[str] = []
        if self.record_ids:
            ids = [json.loads(line).get("id", "") for line in body.splitlines() if line]
        answer = self.script(n, time.monotonic() - self.started)
        if answer == STALL:
            await asyncio.sleep(self.stall_s)
        note = Received(
            time.time(),
            int(request.headers.get("X-Loghubd-Shard", "-1")),
            request.headers.get("X-Loghubd-Cursor", ""),
            request.headers.get("X-Loghubd-Part", ""),
            ids,
            answer,
            request.headers.get("Authorization", ""),
            zipped,
            _client_name(request),
            str(request.url) if request.raw_path.startswith("http") else request.raw_path,
            request.headers.get("Proxy-Authorization", ""),
            len(body),
        )
        self.received.append(note)
        if answer == STALL:
            return web.Response(status=200)
        headers = {"Retry-After": str(self.retry_after)} if answer == 429 else {}
        return web.Response(status=answer, text=f"answer {answer}", headers=headers)

    def start(self) -> Receiver:
        async def serve() -> None:
            app = web.Application(client_max_size=256 * 1024**2)
            app.router.add_post("/ingest", self._handle)
            self._runner = web.AppRunner(app, access_log=None)
            await self._runner.setup()
            self.port = await serve_on_loopback(self._runner, self.tls)

        self._thread = LoopThread("the HTTP receiver")
        self._thread.start(serve)
        return self

    def stop(self) -> None:
        async def down() -> None:
            await self._runner.cleanup()

        self._thread.stop(down)


def _client_name(request: web.Request) -> str:
    transport = request.transport
    peer = transport.get_extra_info("peercert") if transport is not None else None
    for rdn in (peer or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return ""


@asynccontextmanager
async def http_factory(
    handler: Callable[[web.Request], Awaitable[web.Response]],
    options: Mapping[str, Any],
    registry: CollectorRegistry | None = None,
) -> AsyncIterator[HttpFactory]:
    """An `http` processor factory, started, whose `url` is an endpoint served by `handler`
    in the caller's event loop (every method and path); for tests that drive `process`
    themselves, without a daemon."""
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        port = await serve_on_loopback(runner)
        factory = HttpFactory({"url": f"http://127.0.0.1:{port}/ingest", **options})
        factory.bind(make_context(metrics_registry=registry or CollectorRegistry()))
        await factory.start()
        try:
            yield factory
        finally:
            await factory.close()
    finally:
        await runner.cleanup()
