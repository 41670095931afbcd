"""Test support shipped with loghubd: run real `loghubd serve` processes (see pytest_plugin)
and poll them (`wait_until`)."""

from loghubd.testing.process import ServerProcess, free_port
from loghubd.testing.waiting import wait_until

__all__ = ["ServerProcess", "free_port", "wait_until"]
