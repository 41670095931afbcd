"""An aiohttp application served from the test's own process on a loopback port."""

from __future__ import annotations

import ssl

from aiohttp import web


async def serve_on_loopback(
    runner: web.BaseRunner, ssl_context: ssl.SSLContext | None = None
) -> int:
    """Start `runner` (set up) on 127.0.0.1 at a port the kernel picks as it binds, and return
    that port. A port picked first (`free_port`) and bound after could be taken in between by
    another process; in the test's own process there is no need to pick one first."""
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context).start()
    port: int = runner.addresses[-1][1]
    return port
