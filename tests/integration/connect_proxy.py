"""A real forward proxy for https targets, as corporate egress proxies work: it answers
`CONNECT host:port` by opening a TCP connection to the target and piping bytes both ways
(the TLS session runs end to end through it, unseen). It runs in a thread of the test
process and records each CONNECT: the target and its Proxy-Authorization header. A CONNECT
without the expected credentials (when `expect_auth` is set) is refused with 407."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

from tests.integration.loop_thread import LoopThread


@dataclass
class Connect:
    target: str
    proxy_auth: str


@dataclass
class ConnectProxy:
    expect_auth: str = ""
    hosts: dict[str, str] = field(default_factory=dict)  # its own name resolution
    port: int = 0  # the port it listens on, from `start()` (0: before)
    connects: list[Connect] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        with contextlib.suppress(ConnectionError, OSError):
            writer.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            writer.close()
            return
        lines = head.decode("latin-1").split("\r\n")
        method, target, _version = lines[0].split(" ", 2)
        headers = {
            k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:] if h)
        }
        auth = headers.get("proxy-authorization", "")
        self.connects.append(Connect(target, auth))
        if method != "CONNECT":
            writer.write(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
            writer.close()
            return
        if self.expect_auth and auth != self.expect_auth:
            writer.write(b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n")
            writer.close()
            return
        host, _, port = target.rpartition(":")
        try:
            address = self.hosts.get(host, host.strip("[]"))
            up_reader, up_writer = await asyncio.open_connection(address, int(port))
        except OSError:
            writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
            writer.close()
            return
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    def start(self) -> ConnectProxy:
        async def serve() -> None:
            # Port 0: the kernel picks a port as it binds, so none is taken in between.
            self._server = await asyncio.start_server(self._client, "127.0.0.1", 0)
            self.port = self._server.sockets[0].getsockname()[1]

        self._thread = LoopThread("the CONNECT proxy")
        self._thread.start(serve)
        return self

    def stop(self) -> None:
        async def down() -> None:
            self._server.close()
            tunnels = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tunnels:  # the pipes of tunnels still open
                task.cancel()
            await asyncio.gather(*tunnels, return_exceptions=True)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

        self._thread.stop(down)
