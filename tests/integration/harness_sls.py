"""The SLS side of the daemon tests: `Admin`, a small synchronous face of `SlsClient` for
set-up and inspection (logstores, split/merge, group status, checkpoints, cursors).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aiohttp
import anyio

from loghubd.protocol import cursor as cursors
from loghubd.protocol import errors as E
from loghubd.protocol.signing import Credentials
from loghubd.sls import SlsClient

PROJECT = "daemontest"

T = TypeVar("T")


class Admin:
    """Synchronous set-up and inspection calls against a `loghubd serve` (no retries hidden:
    each call is one `SlsClient` call with a fresh session)."""

    def __init__(self, endpoint: str, project: str = PROJECT) -> None:
        self.endpoint = endpoint
        self.project = project

    def _run(self, fn: Callable[[SlsClient], Awaitable[T]]) -> T:
        async def main() -> T:
            async with aiohttp.ClientSession() as session:
                client = SlsClient(
                    session,
                    self.endpoint,
                    self.project,
                    lambda: Credentials("", ""),
                    request_timeout=10.0,
                )
                return await fn(client)

        return anyio.run(main)

    def create_logstore(self, logstore: str, shards: int, ttl: int = 30) -> None:
        async def go(c: SlsClient) -> None:
            with contextlib.suppress(E.ProjectAlreadyExist):
                await c.create_project("daemon tests")
            await c.create_logstore(logstore, shards, ttl=ttl)

        self._run(go)

    def keep(self, logstore: str, days: int) -> None:
        """Sets the logstore's TTL (in the server's `--ttl-day-seconds` days)."""
        self._run(lambda c: c.update_logstore(logstore, ttl=days))

    def create_group(self, logstore: str, group: str, timeout: int, order: bool) -> None:
        self._run(lambda c: c.create_group(logstore, group, timeout, order))

    def list_shards(self, logstore: str) -> list[dict[str, Any]]:
        return self._run(lambda c: c.list_shards(logstore))

    def split(self, logstore: str, shard: int, key: str) -> list[dict[str, Any]]:
        return self._run(lambda c: c.split_shard(logstore, shard, key))

    def merge(self, logstore: str, shard: int) -> list[dict[str, Any]]:
        return self._run(lambda c: c.merge_shard(logstore, shard))

    def cursor(self, logstore: str, shard: int, where: str) -> str:
        return self._run(lambda c: c.get_cursor(logstore, shard, where))

    def group_status(self, logstore: str, group: str) -> dict[str, Any]:
        return self._run(lambda c: c.group_status(logstore, group))

    def checkpoints(self, logstore: str, group: str) -> dict[int, dict[str, Any]]:
        """shard → {checkpoint, consumer, updateTime} as the server holds them."""
        rows = self._run(lambda c: c.checkpoints(logstore, group))
        return {int(r["shard"]): r for r in rows}

    def owners(self, logstore: str, group: str) -> dict[int, str]:
        """shard → owning consumer, from the coordinator's status (loghubd extension)."""
        return {s["shard"]: s["owner"] for s in self.group_status(logstore, group)["shards"]}


def seq_of(cursor: str) -> int:
    """A loghubd cursor as a comparable integer ("" → -1: no checkpoint yet)."""
    return cursors.decode(cursor) if cursor else -1
