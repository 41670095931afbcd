"""A processor that cannot start on a shard follows the failure policy (`start_with_retry`),
and its error names the file an OSError was about."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from loghubd.backoff import Backoff
from loghubd.consumer.processing import RetryPolicy, ShardStopped, start_with_retry
from loghubd.errors import describe_error
from loghubd.ops.metrics import Metrics

FAST = Backoff(initial=0.001, cap=0.002, jitter=0.0)


def test_describe_error_adds_the_path_an_oserror_lacks() -> None:
    exc = FileNotFoundError(2, "No such file or directory")
    exc.filename = "/data/out"
    assert describe_error(exc).endswith("(path /data/out)")
    bare = FileNotFoundError(2, "No such file or directory")
    assert "path" not in describe_error(bare)
    assert describe_error(ValueError("x")) == "ValueError('x')"


def run(fail: int, policy: RetryPolicy, stop_after: int | None = None) -> tuple[Any, int, float]:
    calls = 0
    metrics = Metrics()
    stop = anyio.Event()

    async def make() -> Any:
        nonlocal calls
        calls += 1
        if stop_after is not None and calls >= stop_after:
            stop.set()
        if calls <= fail:
            raise PermissionError(13, "Permission denied", "/out")
        return "processor"

    async def go() -> Any:
        return await start_with_retry(make, 3, policy, metrics, stop, bind={})

    result = anyio.run(go)
    errors = metrics.processor_errors.labels("3")._value.get()
    return result, calls, errors


@pytest.mark.parametrize("on_failure", ["retry", "stop", "dead_letter"])
def test_it_starts_once_the_cause_is_gone(on_failure: str) -> None:
    result, calls, errors = run(2, RetryPolicy(max_attempts=5, on_failure=on_failure, backoff=FAST))
    assert (result, calls, errors) == ("processor", 3, 2)


def test_stop_stops_the_shard_after_max_attempts() -> None:
    result, calls, errors = run(99, RetryPolicy(max_attempts=3, on_failure="stop", backoff=FAST))
    assert isinstance(result, ShardStopped) and calls == 3 and errors == 3
    assert "processor cannot start on shard 3" in result.reason and "/out" in result.reason


@pytest.mark.parametrize("on_failure", ["retry", "dead_letter"])
def test_retry_and_dead_letter_keep_trying_past_max_attempts(on_failure: str) -> None:
    """`dead_letter` has no batch to set aside: a start failure (a sink down, a directory it
    cannot make) is retried, not parked for good."""
    result, calls, _ = run(6, RetryPolicy(max_attempts=2, on_failure=on_failure, backoff=FAST))
    assert (result, calls) == ("processor", 7)


def test_a_stop_request_ends_the_retries() -> None:
    result, calls, _ = run(99, RetryPolicy(backoff=FAST), stop_after=4)
    assert result is None and calls == 4


def test_a_stop_gives_up_a_start_that_hangs() -> None:
    """A processor whose start waits on a sink that is down (e.g. a connection retried for
    ever) does not hold up a stop: nothing was processed, so the start is abandoned."""
    stop = anyio.Event()
    cancelled = False

    async def make() -> Any:
        nonlocal cancelled
        try:
            await anyio.sleep_forever()
        finally:
            cancelled = True

    async def go() -> Any:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: _set_soon(stop))
            with anyio.fail_after(10):
                return await start_with_retry(make, 3, RetryPolicy(), Metrics(), stop, bind={})

    assert anyio.run(go) is None and cancelled


async def _set_soon(event: anyio.Event) -> None:
    await anyio.sleep(0.05)
    event.set()


def test_a_stop_before_the_start_makes_no_processor() -> None:
    """Revoked before its processor was made (during the checkpoint lookup): none is made,
    so none is initialized halfway and shut down."""
    stop = anyio.Event()
    stop.set()
    made = 0

    async def make() -> Any:
        nonlocal made
        made += 1
        return "processor"

    async def go() -> Any:
        return await start_with_retry(make, 3, RetryPolicy(), Metrics(), stop, bind={})

    assert anyio.run(go) is None and made == 0
