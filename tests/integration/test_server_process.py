"""`loghubd.testing.ServerProcess`, what the `loghubd_server` fixtures start: a real `loghubd
serve` that is listening when `start()` returns, or no process at all."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from loghubd.testing.process import ServerProcess


def held_port() -> tuple[socket.socket, int]:
    """A port somebody else listens on (what `free_port` cannot rule out under load)."""
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    return holder, holder.getsockname()[1]


def test_a_port_taken_meanwhile_is_retried_on_another(tmp_path: Path) -> None:
    holder, taken = held_port()
    server = ServerProcess(tmp_path / "srv")
    server.port = taken  # as if free_port's answer had been taken since
    try:
        server.start()
        # A bare connect would have reached `holder` and called this started.
        assert server.port != taken
        assert server.proc is not None and server.proc.poll() is None
        with socket.create_connection(("127.0.0.1", server.port), timeout=2):
            pass
    finally:
        server.kill()
        holder.close()


def test_a_port_given_by_the_caller_is_not_changed(tmp_path: Path) -> None:
    holder, taken = held_port()
    server = ServerProcess(tmp_path / "srv", port=taken)
    try:
        with pytest.raises(RuntimeError, match="address already in use"):
            server.start()
        assert server.port == taken
    finally:
        server.kill()
        holder.close()


def test_a_start_that_times_out_leaves_no_server_behind(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "srv")
    with pytest.raises(TimeoutError, match="not listening"):
        server.start(timeout=0.01)
    assert server.proc is not None and server.proc.poll() is not None
