"""Fixtures for the end-to-end tests against real `loghubd serve` processes.

The official SDK reaches a server through the HTTP_PROXY trick (PROTOCOL.md §2): the endpoint is
`sls.local:<port>` (never resolved) and requests sends absolute-form targets to the "proxy",
which is the server itself; the project comes from the Host header.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from loghubd.testing.process import ServerProcess
from tests.integration import daemon_harness
from tests.integration.sls_http import ENDPOINT_HOST, RawClient


@pytest.fixture
def sdk_via_proxy(monkeypatch: pytest.MonkeyPatch) -> Callable[[ServerProcess], str]:
    """Route the SDK's requests to `server`; returns the endpoint to give the SDK."""

    def point(server: ServerProcess) -> str:
        proxy = f"http://127.0.0.1:{server.port}"
        for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HTTP_PROXY", proxy)
        monkeypatch.setenv("http_proxy", proxy)
        return f"{ENDPOINT_HOST}:{server.port}"

    return point


@pytest.fixture
def raw_client() -> Iterator[Callable[..., RawClient]]:
    """Make raw HTTP clients (closed at teardown)."""
    made: list[RawClient] = []

    def make(server: ServerProcess, project: str = "proj") -> RawClient:
        client = RawClient(server.port, project)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


# -- daemon end-to-end tests (tests/integration/test_daemon_*.py) ----------------------------


@pytest.fixture
def daemon_pools(
    tmp_path: Path,
) -> Iterator[Callable[[ServerProcess], daemon_harness.Pool]]:
    """Make a `daemon_harness.Pool` (daemons + producers) against a server; every process it
    started is killed at teardown."""
    pools: list[daemon_harness.Pool] = []

    def make(server: ServerProcess) -> daemon_harness.Pool:
        pool = daemon_harness.Pool(tmp_path / f"pool-{len(pools)}", server.endpoint)
        pools.append(pool)
        return pool

    yield make
    for pool in pools:
        pool.close()


@pytest.fixture
def daemon_pool(
    loghubd_server: ServerProcess, daemon_pools: Callable[[ServerProcess], daemon_harness.Pool]
) -> daemon_harness.Pool:
    """A pool against a fresh `loghubd serve` (the `loghubd_server` fixture)."""
    return daemon_pools(loghubd_server)
