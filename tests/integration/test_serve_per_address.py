"""`loghubd serve --max-connections-per-address`, through a real server process: past the
limit, one client address's next connection is answered 503 ServerBusy and closed, while
another address still gets in, and the first gets in again once it lets a connection go."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from loghubd.testing.process import ServerProcess


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    base = tmp_path_factory.mktemp("per-address")
    proc = ServerProcess(base / "data", extra_args=["--max-connections-per-address", "2"])
    yield proc.start()
    proc.kill()


def connect(port: int, source: str) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))


def answer(port: int, source: str) -> bytes:
    """The whole answer to one GET /metrics from `source` (b"" if closed unanswered)."""
    with connect(port, source) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def refusal(port: int, source: str) -> bytes:
    """What the server says, unasked, to a new connection within 0.5 s (b"" if nothing: it
    was let in). Nothing is sent: the refusal is written as the connection is accepted, and
    bytes sent to a socket the server has closed would reset it before the answer is read."""
    with connect(port, source) as s:
        s.settimeout(0.5)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except TimeoutError:
            pass
        return out


def test_one_address_cannot_take_every_slot(server: ServerProcess) -> None:
    held = [connect(server.port, "127.0.0.1") for _ in range(2)]
    try:
        deadline = time.monotonic() + 5  # the server counts them once it accepts them
        while not (busy := refusal(server.port, "127.0.0.1")):
            assert time.monotonic() < deadline, "a third connection from one address got in"
        assert busy.startswith(b"HTTP/1.1 503"), busy[:200]
        assert b"ServerBusy" in busy
        other = answer(server.port, "127.0.0.2")
        assert other.startswith(b"HTTP/1.1 200"), other[:200]
    finally:
        for s in held:
            s.close()
    deadline = time.monotonic() + 5  # their slots given back
    while busy := refusal(server.port, "127.0.0.1"):
        assert time.monotonic() < deadline, busy[:200]
    again = answer(server.port, "127.0.0.1")
    assert again.startswith(b"HTTP/1.1 200"), again[:200]


def test_a_negative_limit_is_refused_naming_the_flag(tmp_path: Path) -> None:
    flags = ["--data-dir", str(tmp_path / "d"), "--max-connections-per-address", "-1"]
    done = subprocess.run(
        [sys.executable, "-m", "loghubd", "serve", *flags],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done
    assert done.stderr.strip() == (
        "loghubd serve: --max-connections-per-address must be 0 (no limit) or more, not -1"
    )
    assert not (tmp_path / "d").exists()
