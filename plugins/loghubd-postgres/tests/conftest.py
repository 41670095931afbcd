"""Fixtures of the postgres processor's tests: ONE real PostgreSQL server per test session
(per xdist worker), a fresh database per test."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # pg_server
    sys.path.insert(0, str(HERE))

from pg_server import PgServer  # noqa: E402

_names = itertools.count()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    server = PgServer().start()
    yield server
    server.stop()


@pytest.fixture
def pg_dsn(pg_server: PgServer, worker_id: str) -> str:
    """A DSN to a database of its own for this test."""
    return pg_server.create_database(f"t_{worker_id}_{next(_names)}")
