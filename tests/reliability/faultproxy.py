"""A fault-injecting TCP proxy on 127.0.0.1, between daemons and `loghubd serve`.

It runs its own asyncio loop in a background thread and forwards bytes both ways; the faults
are switched at any time from the controlling thread:

- `set_delay(max_s)`: every request burst (client→server bytes after a quiet gap) is held
  back a random 0..max_s seconds before it is forwarded; order within a connection is kept.
- `set_drop_rate(p)`: each new connection, and each request burst on an open one, is dropped
  with probability p: both sides are closed and the request never reaches the server. The
  first request burst after it is set above 0 is dropped whatever the draw.
- `reset_mid_response(p)`: each response burst (server→client) is, with probability p, cut
  in half: the first half is forwarded, then the client connection is reset (RST).
- `blackhole(on)`: while on, new connections are accepted and read but never answered, and
  open connections stall (bytes are read and discarded in both directions, nothing is
  forwarded). When it goes off, the stalled connections are reset: a partition long enough
  for the peers to give up on them. New connections work again at once.

`stats()` counts connections and injected faults. The proxy binds 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

BURST_GAP_S = 0.02  # bytes arriving after this much quiet start a new request/response burst
CHUNK = 65536


@dataclass
class ProxyStats:
    connections: int = 0
    dropped_connections: int = 0  # new connections closed at once
    dropped_requests: int = 0  # request bursts not forwarded, connection closed
    resets: int = 0  # responses cut in half and reset
    delayed: int = 0  # request bursts held back
    delay_total_s: float = 0.0
    blackholed_connections: int = 0  # connections stalled or accepted-and-ignored
    upstream_refused: int = 0  # the server was not there
    open: int = 0

    def as_dict(self) -> dict[str, float | int]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass
class _Faults:
    delay_max: float = 0.0
    drop_rate: float = 0.0
    drop_next: bool = False  # the next request burst is dropped whatever the draw
    reset_rate: float = 0.0
    blackhole: bool = False


@dataclass(eq=False)
class _Conn:
    client_r: asyncio.StreamReader
    client_w: asyncio.StreamWriter
    server_w: asyncio.StreamWriter | None = None
    holed: bool = False
    closed: bool = False
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)


def _rst(writer: asyncio.StreamWriter | None) -> None:
    """Close with a TCP reset (SO_LINGER 0), not a FIN."""
    if writer is None:
        return
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class FaultProxy:
    def __init__(self, upstream_port: int, *, seed: int | None = None, port: int = 0) -> None:
        self.upstream_port = upstream_port
        self._want_port = port
        self.port = 0
        self._rng = random.Random(seed)
        self._faults = _Faults()
        self._stats = ProxyStats()
        self._conns: set[_Conn] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stopped: asyncio.Event | None = None
        self._error: BaseException | None = None

    # -- control (from any thread) -----------------------------------------------------------

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FaultProxy:
        self._thread = threading.Thread(target=self._thread_main, name="faultproxy", daemon=True)
        self._thread.start()
        self._ready.wait(10)
        if self._error is not None:
            raise RuntimeError(f"fault proxy did not start: {self._error!r}")
        return self

    def close(self) -> None:
        if self._loop is None or self._thread is None:
            return
        with contextlib.suppress(RuntimeError):
            self._call(self._shutdown())
        self._thread.join(10)
        self._loop = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def set_delay(self, max_s: float) -> None:
        self._faults.delay_max = max(0.0, float(max_s))

    def set_drop_rate(self, p: float) -> None:
        """Each new connection and request burst is dropped with probability `p`; the first
        request burst after a rate above 0 is set is dropped for certain, so a short fault
        phase always has a drop to recover from (a run of ~150 requests at 5 % has none
        once in ~1,600)."""
        self._faults.drop_rate = min(1.0, max(0.0, float(p)))
        self._faults.drop_next = self._faults.drop_rate > 0

    def reset_mid_response(self, p: float) -> None:
        self._faults.reset_rate = min(1.0, max(0.0, float(p)))

    def blackhole(self, on: bool) -> None:
        self._call(self._set_blackhole(bool(on)))

    def clear(self) -> None:
        """No faults at all (ends a black-hole too)."""
        self.set_delay(0)
        self.set_drop_rate(0)
        self.reset_mid_response(0)
        self.blackhole(False)

    def stats(self) -> dict[str, float | int]:
        return self._stats.as_dict()

    # -- the loop ----------------------------------------------------------------------------

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        assert self._loop is not None, "proxy not started"
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    def _thread_main(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported to start()
            self._error = exc
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self._want_port)
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        await self._stopped.wait()

    async def _shutdown(self) -> None:
        assert self._server is not None and self._stopped is not None
        self._server.close()
        for conn in list(self._conns):
            self._close(conn, reset=True)
        self._stopped.set()

    async def _set_blackhole(self, on: bool) -> None:
        was = self._faults.blackhole
        self._faults.blackhole = on
        if on and not was:
            for conn in self._conns:
                if not conn.holed:
                    conn.holed = True
                    self._stats.blackholed_connections += 1
        if was and not on:
            for conn in list(self._conns):
                if conn.holed:
                    self._close(conn, reset=True)

    def _close(self, conn: _Conn, *, reset: bool) -> None:
        if conn.closed:
            return
        conn.closed = True
        self._conns.discard(conn)
        self._stats.open = len(self._conns)
        for w in (conn.client_w, conn.server_w):
            if w is None:
                continue
            if reset:
                _rst(w)
            else:
                w.close()
        current = asyncio.current_task()
        for t in conn.tasks:
            if t is not current:
                t.cancel()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        f = self._faults
        self._stats.connections += 1
        conn = _Conn(reader, writer)
        self._conns.add(conn)
        self._stats.open = len(self._conns)
        if f.blackhole:
            conn.holed = True
            self._stats.blackholed_connections += 1
            await self._swallow(conn)
            return
        if f.drop_rate and self._rng.random() < f.drop_rate:
            self._stats.dropped_connections += 1
            self._close(conn, reset=False)
            return
        try:
            server_r, conn.server_w = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            self._stats.upstream_refused += 1
            self._close(conn, reset=True)
            return
        if conn.closed:  # black-holed and healed while we connected
            conn.server_w.close()
            return
        up = asyncio.create_task(self._client_to_server(conn))
        down = asyncio.create_task(self._server_to_client(conn, server_r))
        conn.tasks += [up, down]
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(up, down, return_exceptions=True)
        self._close(conn, reset=False)

    async def _swallow(self, conn: _Conn) -> None:
        """A black-holed connection: read and discard until the client gives up or the
        black-hole ends (then `_set_blackhole` resets it)."""
        task = asyncio.current_task()
        assert task is not None
        conn.tasks.append(task)
        with contextlib.suppress(asyncio.CancelledError, OSError):
            while await conn.client_r.read(CHUNK):
                pass
        self._close(conn, reset=False)

    async def _client_to_server(self, conn: _Conn) -> None:
        """Requests: dropped or delayed per burst; order kept by a queue and one writer."""
        queue: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()
        writer_task = asyncio.create_task(self._write_due(conn, queue))
        last_read = 0.0
        due = 0.0
        try:
            while True:
                data = await conn.client_r.read(CHUNK)
                if not data:
                    break
                if conn.holed:
                    continue  # stalled: swallowed
                now = time.monotonic()
                f = self._faults
                if now - last_read > BURST_GAP_S:  # a new request
                    if f.drop_rate and (f.drop_next or self._rng.random() < f.drop_rate):
                        f.drop_next = False
                        self._stats.dropped_requests += 1
                        self._close(conn, reset=False)
                        return
                    delay = self._rng.uniform(0, f.delay_max) if f.delay_max else 0.0
                    if delay:
                        self._stats.delayed += 1
                        self._stats.delay_total_s += delay
                    due = max(due, now + delay)
                last_read = now
                queue.put_nowait((due, data))
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            queue.put_nowait(None)
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await writer_task

    async def _write_due(
        self, conn: _Conn, queue: asyncio.Queue[tuple[float, bytes] | None]
    ) -> None:
        w = conn.server_w
        assert w is not None
        while (item := await queue.get()) is not None:
            due, data = item
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if conn.holed or conn.closed:
                continue
            w.write(data)
            await w.drain()
        if not conn.closed and w.can_write_eof():
            with contextlib.suppress(OSError):
                w.write_eof()

    async def _server_to_client(self, conn: _Conn, server_r: asyncio.StreamReader) -> None:
        """Responses: forwarded, or (per burst) cut in half and reset."""
        last_read = 0.0
        try:
            while True:
                data = await server_r.read(CHUNK)
                if not data:
                    break
                if conn.holed:
                    continue
                now = time.monotonic()
                f = self._faults
                if (
                    now - last_read > BURST_GAP_S
                    and f.reset_rate
                    and self._rng.random() < f.reset_rate
                ):
                    self._stats.resets += 1
                    conn.client_w.write(data[: max(1, len(data) // 2)])
                    with contextlib.suppress(OSError):
                        await conn.client_w.drain()
                    await asyncio.sleep(0.01)
                    self._close(conn, reset=True)
                    return
                last_read = now
                conn.client_w.write(data)
                await conn.client_w.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        if not conn.closed:
            self._close(conn, reset=False)
