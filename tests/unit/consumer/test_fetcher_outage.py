"""The fetch loop rides out a service that cannot be reached at any of its calls.

A scripted client stands in for the service here (the loop's logic, not the wire, is under
test; the wire is covered by the integration suites). Every call the loop makes besides the
pull itself (the read-only check, the end cursor, the restart position after an expired
cursor) fails for a while; the loop must keep going and finish exactly as it would have.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from loghubd.backoff import Backoff
from loghubd.consumer.budget import ByteBudget
from loghubd.consumer.fetcher import (
    CursorReset,
    EndOfShard,
    FetchSettings,
    FetchStatus,
    Item,
    ShardCatalog,
    run_fetcher,
)
from loghubd.ops.metrics import Metrics
from loghubd.protocol import cursor as cursors
from loghubd.protocol import errors as E
from loghubd.sls import Pulled, Unreachable

END = cursors.encode(0)


class Flaky:
    """Each named call fails with Unreachable its first `failures[name]` times."""

    def __init__(self, failures: dict[str, int], *, expired: str | None = None) -> None:
        self.failures = dict(failures)
        self.calls: dict[str, int] = {}
        self.expired = expired  # pulls from this cursor answer InvalidCursor

    def _call(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1
        if self.failures.get(name, 0) > 0:
            self.failures[name] -= 1
            raise Unreachable(f"{name}: connection refused")

    async def pull(self, logstore: str, shard: int, cursor: str, count: int, **_: Any) -> Pulled:
        self._call("pull")
        if cursor == self.expired:
            raise E.InvalidCursor("cursor expired")
        return Pulled(b"", 0, cursor, 0, False, 0, 0)  # no end-of-cursor hint

    async def list_shards(self, logstore: str) -> list[dict[str, object]]:
        self._call("list_shards")
        return [{"shardID": 0, "status": "readonly"}]

    async def get_cursor(self, logstore: str, shard: int, at: str) -> str:
        self._call(f"get_cursor:{at}")
        return END


async def _run(client: Flaky, start: str = END) -> list[Item]:
    settings = FetchSettings(
        logstore="ls",
        max_log_groups=100,
        fetch_interval=0.01,
        backoff=Backoff(initial=0.02, cap=0.02),
    )
    metrics = Metrics()
    send, receive = anyio.create_memory_object_stream[Item](10)
    with anyio.fail_after(10):
        await run_fetcher(
            client,  # type: ignore[arg-type]
            settings,
            0,
            start,
            send,
            budget=ByteBudget(1 << 20, metrics),
            catalog=ShardCatalog(client, "ls"),  # type: ignore[arg-type]
            metrics=metrics,
            status=FetchStatus(),
            start_position=lambda: client.get_cursor("ls", 0, "begin"),
            bind={},
        )
    async with receive:
        return [item async for item in receive]


@pytest.mark.parametrize(
    "failures",
    [
        {},
        {"list_shards": 3},
        {"get_cursor:end": 3},
        {"pull": 2, "list_shards": 2, "get_cursor:end": 2},
    ],
)
def test_end_of_a_readonly_shard_is_reached_through_an_outage(failures: dict[str, int]) -> None:
    client = Flaky(failures)
    items = anyio.run(_run, client)
    assert items == [EndOfShard(END)]
    assert all(left == 0 for left in client.failures.values()), client.failures


def test_an_expired_cursor_waits_for_the_restart_position() -> None:
    client = Flaky({"get_cursor:begin": 3}, expired=cursors.encode(5))
    items = anyio.run(_run, client, cursors.encode(5))
    assert isinstance(items[0], CursorReset) and items[0].cursor == END
    assert items[1:] == [EndOfShard(END)]
    assert client.calls["get_cursor:begin"] == 4
