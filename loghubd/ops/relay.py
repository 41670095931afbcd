"""What the `--workers N` supervisor tells systemd about its children. Pure: no I/O, time is
an argument.

systemd, with the unit's `NotifyAccess=main`, only listens to the supervisor (the main PID);
each child speaks sd_notify to a socket of the supervisor's instead. Invariants:

1. READY=1 goes to systemd once, when every child has said READY=1 since it last started;
   a child restarted later does not un-ready the service (systemd has no such state).
2. The supervisor pets systemd's watchdog from its own loop; a child that said READY=1 and
   then sent no WATCHDOG=1 for a whole watchdog period is `stuck`: the supervisor kills it
   (and restarts it like any dead child) rather than letting systemd restart every worker.
3. A child reloading its configuration (RELOADING=1, loghubd.shutdown) is starting again: not
   ready, so not stuck, until it says READY=1 again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass
class _Child:
    ready: bool = False
    last_ping: float = 0.0


@dataclass
class Relay:
    """:param watchdog_s: systemd's WatchdogSec (0 when no watchdog is set)."""

    names: Iterable[str]
    watchdog_s: float = 0.0
    announced: bool = False
    _children: dict[str, _Child] = field(init=False)

    def __post_init__(self) -> None:
        self._children = {name: _Child() for name in self.names}

    def started(self, name: str, now: float) -> None:
        """The child `name` was (re)started: not ready until it says so again."""
        self._children[name] = _Child(last_ping=now)

    def heard(self, name: str, message: str, now: float) -> None:
        """A datagram from the child `name` (newline-separated `KEY=VALUE` assignments)."""
        child = self._children[name]
        for line in message.splitlines():
            if line == "READY=1":
                child.ready = True
                child.last_ping = now
            elif line == "WATCHDOG=1":
                child.last_ping = now
            elif line == "RELOADING=1":  # SIGHUP: it stops and starts again in place
                child.ready = False
                child.last_ping = now

    def ready_count(self) -> int:
        return sum(c.ready for c in self._children.values())

    def take_ready(self) -> bool:
        """True exactly once: when every child is ready for the first time (send READY=1)."""
        if self.announced or self.ready_count() < len(self._children):
            return False
        self.announced = True
        return True

    def stuck(self, now: float) -> list[str]:
        """Ready children whose watchdog pings stopped for a whole watchdog period."""
        if not self.watchdog_s:
            return []
        return [
            name
            for name, c in self._children.items()
            if c.ready and now - c.last_ping > self.watchdog_s
        ]
