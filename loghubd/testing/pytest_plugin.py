"""pytest fixtures for loghubd and its plugin authors (registered through `pytest11`).

`loghubd_server` gives each test a fresh, real `loghubd serve` process over HTTP;
`loghubd_server_factory` starts as many as a test needs. Every process is killed at teardown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from loghubd.testing.process import ServerProcess


@pytest.fixture
def loghubd_server_factory(tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    started: list[ServerProcess] = []

    def start(name: str = "server", extra_args: list[str] | None = None) -> ServerProcess:
        proc = ServerProcess(tmp_path / name, extra_args=extra_args)
        started.append(proc)  # killed at teardown even when its start fails
        return proc.start()

    yield start
    for proc in started:
        proc.kill()


@pytest.fixture
def loghubd_server(loghubd_server_factory: Callable[..., ServerProcess]) -> ServerProcess:
    return loghubd_server_factory()
