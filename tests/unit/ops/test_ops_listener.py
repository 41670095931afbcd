"""The ops listener's connection limits, through real sockets (the listener in the test's
event loop, with small limits): idle connections past `MAX_CONNECTIONS` are answered 503 at
once, a request head that does not come within `HEADER_TIMEOUT_S` is answered 408 and its
connection closed, and the probes answer again as soon as a slot is free. Without them,
whoever reached the port could hold connections until the daemon ran out of descriptors."""

from __future__ import annotations

import anyio
import pytest
from prometheus_client import CollectorRegistry

from loghubd.ops import server as ops
from loghubd.ops.health import Verdict


async def _get(port: int, path: str, source: str = "127.0.0.1") -> bytes:
    async with await anyio.connect_tcp("127.0.0.1", port, local_host=source) as s:
        await s.send(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        return await _read_all(s)


async def _read_all(s: anyio.abc.SocketStream) -> bytes:
    out = b""
    with anyio.fail_after(5):
        while True:
            try:
                out += await s.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return out


def test_idle_connections_are_capped_and_timed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ops, "MAX_CONNECTIONS", 3)
    monkeypatch.setattr(ops, "HEADER_TIMEOUT_S", 0.5)
    app = ops.make_app(
        CollectorRegistry(), lambda: Verdict(True, ()), lambda: {}, status_token="tok"
    )

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            port = await tg.start(ops.serve_ops, app, "127.0.0.1:0")
            idle = [await anyio.connect_tcp("127.0.0.1", port) for _ in range(3)]
            await idle[0].send(b"GET /healthz HTTP/1.1\r\n")  # a head begun, never finished
            # A fourth connection: refused at once, with a complete answer.
            assert (await _get(port, "/healthz")).startswith(b"HTTP/1.1 503"), "not capped"
            # The idle ones are answered 408 and closed once their time is up ...
            for s in idle:
                assert (await _read_all(s)).startswith(b"HTTP/1.1 408"), "not timed out"
                await s.aclose()
            # ... and the probes answer again.
            assert b'"alive"' in await _get(port, "/healthz")
            # /status still wants its token (compared in constant time).
            assert (await _get(port, "/status")).startswith(b"HTTP/1.1 401")
            tg.cancel_scope.cancel()

    anyio.run(main)


def test_one_address_cannot_take_every_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past `MAX_PER_ADDRESS` connections from one address its next one is answered 503, while
    another address (Prometheus, the kubelet's probes) still gets in."""
    monkeypatch.setattr(ops, "MAX_CONNECTIONS", 10)
    monkeypatch.setattr(ops, "MAX_PER_ADDRESS", 2)
    app = ops.make_app(CollectorRegistry(), lambda: Verdict(True, ()), lambda: {})

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            port = await tg.start(ops.serve_ops, app, "127.0.0.1:0")
            held = [await anyio.connect_tcp("127.0.0.1", port) for _ in range(2)]
            await anyio.sleep(0.1)  # both counted
            assert (await _get(port, "/healthz")).startswith(b"HTTP/1.1 503"), "not capped"
            assert b'"alive"' in await _get(port, "/healthz", source="127.0.0.2")
            for s in held:
                await s.aclose()
            await anyio.sleep(0.1)  # their slots given back
            assert b'"alive"' in await _get(port, "/healthz")
            tg.cancel_scope.cancel()

    anyio.run(main)
