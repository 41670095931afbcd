"""A recording HTTP proxy in front of a real `loghubd serve`, for the operator-tool tests.

Every request is recorded (method, path, query, headers, body) and forwarded to the server;
the answer goes back unchanged. It accepts origin-form targets (our client) and absolute-form
ones (the official SDK through HTTP_PROXY). `rewrite_query` can change what is forwarded, to
play a service that does not know one of serve's extensions (SLS answers an unknown
`type=status` as a plain GetCheckPoint).
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlencode, urlsplit


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # lower-case names
    body: bytes


class RecordingProxy:
    def __init__(
        self,
        server_port: int,
        rewrite_query: Callable[[str, dict[str, str]], dict[str, str]] | None = None,
    ) -> None:
        self.server_port = server_port
        self.rewrite_query = rewrite_query
        self.records: list[Recorded] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _any(self) -> None:
                target = urlsplit(self.path)
                query = dict(parse_qsl(target.query, keep_blank_values=True))
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k.lower(): v for k, v in self.headers.items()}
                with proxy._lock:
                    proxy.records.append(Recorded(self.command, target.path, query, headers, body))
                if proxy.rewrite_query is not None:
                    query = proxy.rewrite_query(target.path, query)
                conn = http.client.HTTPConnection("127.0.0.1", proxy.server_port, timeout=30)
                try:
                    path = target.path + (f"?{urlencode(query)}" if query else "")
                    forward = {
                        k: v for k, v in self.headers.items() if k.lower() != "proxy-connection"
                    }
                    conn.request(self.command, path, body=body or None, headers=forward)
                    answer = conn.getresponse()
                    data = answer.read()
                finally:
                    conn.close()
                self.send_response(answer.status)
                for name, value in answer.getheaders():
                    if name.lower() not in ("content-length", "transfer-encoding", "connection"):
                        self.send_header(name, value)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = _any

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> RecordingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def take(self) -> list[Recorded]:
        with self._lock:
            out, self.records = self.records, []
        return out
