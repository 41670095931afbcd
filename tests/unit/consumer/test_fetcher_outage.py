"""The fetch loop rides out a service that cannot be reached at any of its calls.

A scripted client stands in for the service here (the loop's logic, not the wire, is under
test; the wire is covered by the integration suites). Every call the loop makes besides the
pull itself (the read-only check, the end cursor, the restart position after an expired
cursor) fails for a while; the loop must keep going and finish exactly as it would have.
While pulls fail the shard's lag is unknown, and the first answered pull says the fault ended.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import anyio
import pytest
import structlog

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


class Refusing(Flaky):
    """Pulls fail while `down` is set; a pull answered brings nothing (caught up)."""

    def __init__(self) -> None:
        super().__init__({})
        self.down = True
        self.failed = 0

    async def pull(self, logstore: str, shard: int, cursor: str, count: int, **_: Any) -> Pulled:
        if self.down:
            self.failed += 1
            raise Unreachable("127.0.0.1:1: connection refused")
        return Pulled(b"", 0, cursor, 0, False, 0, 0)

    async def list_shards(self, logstore: str) -> list[dict[str, object]]:
        return [{"shardID": 0, "status": "readwrite"}]


def lag_gauges(metrics: Metrics) -> list[float]:
    return [
        g.labels("0")._value.get()
        for g in (metrics.lag_log_groups, metrics.lag_logs, metrics.lag_seconds)
    ]


def test_while_pulls_fail_the_lag_is_unknown_and_the_first_answer_says_it_is_over() -> None:
    """A caught-up shard (lag 0) whose pulls start failing: it is no longer "caught up", its
    lag is unknown (the gauges NaN, not the 0 measured last) until a pull is answered; then
    one `pull_recovered` line, and the lag is measured again."""
    client, metrics = Refusing(), Metrics()
    status = FetchStatus(caught_up=True, lag_log_groups=0, lag_seconds=0.0)
    for gauge in (metrics.lag_log_groups, metrics.lag_logs, metrics.lag_seconds):
        gauge.labels("0").set(0)
    seen: list[tuple[bool, int | None, float | None, str, list[float]]] = []

    def on_error(message: str) -> None:  # told after each failed pull
        seen.append(
            (
                status.caught_up,
                status.lag_log_groups,
                status.pulls.failing_since,
                status.pull_error,
                lag_gauges(metrics),
            )
        )
        if len(seen) == 3:
            client.down = False

    async def main() -> None:
        send, receive = anyio.create_memory_object_stream[Item](10)
        async with anyio.create_task_group() as tg, receive:
            tg.start_soon(
                functools.partial(
                    run_fetcher,
                    client,  # type: ignore[arg-type]
                    FetchSettings(
                        logstore="ls",
                        max_log_groups=100,
                        fetch_interval=0.01,
                        backoff=Backoff(initial=0.01, cap=0.01),
                    ),
                    0,
                    END,
                    send,
                    budget=ByteBudget(1 << 20, metrics),
                    catalog=ShardCatalog(client, "ls"),  # type: ignore[arg-type]
                    metrics=metrics,
                    status=status,
                    start_position=lambda: client.get_cursor("ls", 0, "begin"),
                    bind={"shard": 0},
                    on_error=on_error,
                )
            )
            with anyio.fail_after(10):
                while status.pulls.failing_since is not None or not status.caught_up:  # noqa: ASYNC110
                    await anyio.sleep(0.005)
                await anyio.sleep(0.05)  # a few answered pulls more: nothing more is said
            tg.cancel_scope.cancel()

    with structlog.testing.capture_logs() as logs:
        anyio.run(main)
    assert len(seen) == 3, seen
    first = seen[0][2]
    for caught_up, lag, since, error, gauges in seen:
        assert (caught_up, lag, since) == (False, None, first), seen
        assert error.endswith("127.0.0.1:1: connection refused"), error
        assert all(math.isnan(v) for v in gauges), gauges
    assert (status.caught_up, status.lag_log_groups, status.pull_error) == (True, 0, "")
    assert lag_gauges(metrics) == [0.0, 0.0, 0.0]
    events = [e["event"] for e in logs]
    assert events.count("pull_failed") == 3
    [recovered] = [e for e in logs if e["event"] == "pull_recovered"]
    assert recovered["shard"] == 0 and recovered["failures"] == 3
    assert recovered["failing_for_s"] > 0
    assert events.index("pull_recovered") > max(
        i for i, e in enumerate(events) if e == "pull_failed"
    )


def test_pulls_that_never_failed_say_nothing_of_recovering() -> None:
    with structlog.testing.capture_logs() as logs:
        assert anyio.run(_run, Flaky({"list_shards": 2})) == [EndOfShard(END)]
    assert not [e for e in logs if e["event"] == "pull_recovered"]
