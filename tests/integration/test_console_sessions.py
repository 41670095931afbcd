"""Console sessions of a real `loghubd serve` outlive a restart (the signing key is kept in
the data directory), and end when the credential that opened them changes."""

from __future__ import annotations

import http.client
import stat
import time
from collections.abc import Callable
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


def test_wrong_credentials_are_held_back_and_said_once_per_window(tmp_path: Path) -> None:
    """Guessing the console token is slow (each refusal answers after a second) and seen: a
    warning naming the client's address, one per address per 10 s with the rest counted,
    never the guess itself; a sign-in that works is logged too."""
    server = ServerProcess(tmp_path / "data", extra_args=["--console-token", "right"]).start()
    try:
        began = time.monotonic()
        for guess in ("guess-1", "guess-2"):
            # a secret typed into the key id field is not one of the keys: never logged
            form = {"token": guess, "key_id": "pasted-secret-1", "next": "/console"}
            assert request(server.port, "POST", "/console/login", form=form).status == 401
        assert time.monotonic() - began >= 1.8, "refusals are not held back"
        form = {"token": "right", "next": "/console"}
        assert request(server.port, "POST", "/console/login", form=form).status == 303
        wait_for(lambda: server.events("console_signed_in"))
        (said,) = server.events("console_sign_in_refused")
        assert said["remote"] == "127.0.0.1" and said["level"] == "warning", said
        assert said["suppressed"] == 0, said  # the second is counted in the next line
        assert "guess-" not in server.log_path.read_text()
        assert "pasted-secret" not in server.log_path.read_text()
        (signed,) = server.events("console_signed_in")
        assert signed["subject"] == "token", signed
    finally:
        server.kill()


def wait_for(check: Callable[[], object], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "not logged in time"
        time.sleep(0.05)
