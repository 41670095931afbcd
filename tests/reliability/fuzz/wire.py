"""One fuzz request (`Req`) as bytes on a socket, and its answer (`Reply`): `Wire` sends
anything, valid HTTP or not, and reads what comes back."""

from __future__ import annotations

import http.client
import socket
from dataclasses import dataclass
from urllib.parse import quote_from_bytes

from tests.reliability.fuzz.layout import HOST_SUFFIX, KEEP_PROJECT, RAW_TIMEOUT_S


@dataclass(frozen=True)
class Req:
    api: str  # label for statistics, e.g. "PutLogs" or "GetShard:log"
    method: str = "GET"
    path: str = "/"  # already percent-encoded
    query: tuple[tuple[bytes, bytes], ...] = ()
    headers: tuple[tuple[bytes, bytes], ...] = ()
    body: bytes = b""
    project: str = KEEP_PROJECT  # Host: <project>.sls.local ("" = bare sls.local)
    host: bytes | None = None  # an explicit Host value instead (None: from project)
    no_host: bool = False
    must_refuse: bool = False  # aimed at protected data: a 4xx is the only right answer
    raw: bytes | None = None  # the whole request as bytes (not valid HTTP)
    half_close: bool = False  # raw: shut our side down after sending (a truncated body)

    def target(self) -> bytes:
        path = self.path.encode("latin-1")
        if not self.query:
            return path
        q = "&".join(
            f"{quote_from_bytes(k, safe='')}={quote_from_bytes(v, safe='')}" for k, v in self.query
        )
        return path + b"?" + q.encode()

    def encode(self) -> bytes:
        if self.raw is not None:
            return self.raw
        lines = [self.method.encode() + b" " + self.target() + b" HTTP/1.1"]
        if not self.no_host:
            host = self.host
            if host is None:
                host = (f"{self.project}.{HOST_SUFFIX}" if self.project else HOST_SUFFIX).encode()
            lines.append(b"Host: " + host)
        names = {k.lower() for k, _v in self.headers}
        lines += [k + b": " + v for k, v in self.headers]
        if b"content-length" not in names and b"transfer-encoding" not in names:
            lines.append(b"Content-Length: " + str(len(self.body)).encode())
        if b"x-log-apiversion" not in names:
            lines.append(b"x-log-apiversion: 0.6.0")
        return b"\r\n".join(lines) + b"\r\n\r\n" + self.body

    def short(self) -> str:
        head = self.raw[:200] if self.raw is not None else self.encode()[:300]
        return f"{self.api} must_refuse={self.must_refuse} body={len(self.body)}B: {head!r}"


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes


class Wire:
    """Sends `Req`s over one keep-alive socket (a fresh one after any trouble)."""

    def __init__(self, port: int, timeout: float = 30.0) -> None:
        self.port = port
        self.timeout = timeout
        self.sock: socket.socket | None = None

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def send(self, req: Req) -> Reply | None:
        """The answer, or None when the server closed the connection without one."""
        if req.raw is not None:
            return self._send_raw(req)
        for _attempt in range(2):
            fresh = self.sock is None
            try:
                return self._send(req)
            except (ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine):
                self.close()
                if fresh:
                    return None
            # A kept-alive socket may have been closed by the server meanwhile: once more.
        return None

    def _send_raw(self, req: Req) -> Reply | None:
        """Not valid HTTP: only the status line of an answer is read (it may be any version)."""
        assert req.raw is not None
        with socket.create_connection(("127.0.0.1", self.port), timeout=RAW_TIMEOUT_S) as sock:
            try:
                sock.sendall(req.raw)
                if req.half_close:
                    sock.shutdown(socket.SHUT_WR)
                data = b""
                while b"\r\n" not in data and len(data) < 65536:
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    data += chunk
            except (TimeoutError, ConnectionError):
                return None
        line = data.split(b"\r\n", 1)[0].split()
        if len(line) < 2 or not line[0].startswith(b"HTTP/") or not line[1].isdigit():
            return None
        return Reply(int(line[1]), {}, data)

    def _send(self, req: Req) -> Reply:
        if self.sock is None:
            self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=self.timeout)
        sock = self.sock
        sock.sendall(req.encode())
        resp = http.client.HTTPResponse(sock, method=req.method)
        try:
            resp.begin()
            body = resp.read()
        except BaseException:
            self.close()
            raise
        headers = {k.lower(): v for k, v in resp.getheaders()}
        if resp.will_close or headers.get("connection") == "close":
            self.close()
        return Reply(resp.status, headers, body)
