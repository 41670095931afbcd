"""sd_notify over `$NOTIFY_SOCKET`, without libsystemd: READY=1, WATCHDOG=1, STOPPING=1."""

from __future__ import annotations

import os
import socket


class SystemdNotifier:
    def __init__(self, address: str | None) -> None:
        self.address = address

    @classmethod
    def from_env(cls) -> SystemdNotifier:
        return cls(os.environ.get("NOTIFY_SOCKET") or None)

    @staticmethod
    def watchdog_interval() -> float:
        """Half of systemd's WatchdogSec (from $WATCHDOG_USEC), or 0 when no watchdog is set."""
        try:
            usec = int(os.environ.get("WATCHDOG_USEC", "0"))
        except ValueError:
            return 0.0
        return usec / 2_000_000 if usec > 0 else 0.0

    def send(self, state: str) -> None:
        """Send one notification; silently nothing when not run by systemd."""
        if not self.address:
            return
        addr = self.address
        if addr.startswith("@"):  # abstract namespace socket
            addr = "\0" + addr[1:]
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            try:
                sock.connect(addr)
                sock.sendall(state.encode())
            except OSError:
                pass  # systemd went away: nothing useful to do
