"""Test support shipped with loghubd: run real `loghubd serve` processes (see pytest_plugin)."""

from loghubd.testing.process import ServerProcess, free_port

__all__ = ["ServerProcess", "free_port"]
