"""A NOTIFY_SOCKET for tests: what systemd would hear from a daemon, and from which PID."""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path

UCRED = struct.Struct("iII")  # pid, uid, gid


class Listener:
    """A NOTIFY_SOCKET: every datagram with the PID of the process that sent it."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.sock.bind(str(path))
        self.got: list[tuple[int, str]] = []

    def receive_until(self, want: str, count: int = 1, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while sum(m == want for _, m in self.got) < count:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"waiting for {count} x {want}; got {self.got}"
            self.sock.settimeout(remaining)
            try:
                data, ancillary, _flags, _addr = self.sock.recvmsg(
                    4096, socket.CMSG_SPACE(UCRED.size)
                )
            except TimeoutError:
                continue
            pid = -1
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    pid = UCRED.unpack(payload[: UCRED.size])[0]
            self.got += [(pid, line) for line in data.decode().splitlines()]

    def messages(self) -> list[str]:
        return [m for _, m in self.got]
