"""Console sessions of a real `loghubd serve` outlive a restart (the signing key is kept in
the data directory), and end when the credential that opened them changes."""

from __future__ import annotations

import http.client
import stat
from pathlib import Path
from urllib.parse import urlencode

from loghubd.testing.process import ServerProcess


def request(
    port: int, method: str, path: str, *, cookie: str = "", form: dict[str, str] | None = None
) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {"Cookie": cookie} if cookie else {}
    body = None
    if form is not None:
        body = urlencode(form)
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    conn.request(method, path, body=body, headers=headers)
    answer = conn.getresponse()
    answer.read()
    conn.close()
    return answer


def test_a_session_outlives_a_restart_but_not_a_new_token(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = ServerProcess(data, extra_args=["--console-token", "first-token"]).start()
    try:
        signed = request(
            server.port, "POST", "/console/login", form={"token": "first-token", "next": "/console"}
        )
        assert signed.status == 303, signed.status
        cookie = signed.getheader("Set-Cookie", "").split(";")[0]
        assert cookie.startswith("loghubd_console="), cookie
        assert request(server.port, "GET", "/console", cookie=cookie).status == 200
        assert request(server.port, "GET", "/console").status == 303  # no cookie: sign in
        kept = data / "console-session.key"
        assert stat.S_IMODE(kept.stat().st_mode) == 0o600

        server.restart()  # kill -9, same data and port
        assert request(server.port, "GET", "/console", cookie=cookie).status == 200

        server.kill()
        server = ServerProcess(
            data, port=server.port, extra_args=["--console-token", "second-token"]
        ).start()
        refused = request(server.port, "GET", "/console", cookie=cookie)
        assert refused.status == 303, refused.status
        assert (refused.getheader("Location") or "").startswith("/console/login")
    finally:
        server.kill()
