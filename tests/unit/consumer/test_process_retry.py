"""A failing batch follows the failure policy (`process_with_retry`): retried up to
`max_attempts`, then set aside or the shard stopped; a `BatchRejected` (retrying cannot help)
gets the policy at once; a stop of the shard ends the retrying (`Interrupted`)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
import structlog

from loghubd import BatchInterrupted, BatchRejected
from loghubd.backoff import Backoff
from loghubd.consumer.processing import (
    DeadLettered,
    Interrupted,
    Outcome,
    Processed,
    RetryPolicy,
    ShardStopped,
    process_with_retry,
)
from loghubd.ops.metrics import Metrics
from loghubd.plugins.loaded import LoadedProcessor, load_factory
from loghubd.testing import RecordingTracker, make_batch

FAST = Backoff(initial=0.001, cap=0.002, jitter=0.0)


async def one_batch(
    processor: LoadedProcessor,
    policy: RetryPolicy,
    *,
    failing: Callable[[str], None],
    tracker: RecordingTracker | None = None,
) -> Outcome:
    """`process_with_retry` of one small batch of shard 2."""
    return await process_with_retry(
        processor,
        make_batch([{"id": str(i)} for i in range(3)], shard=2),
        tracker or RecordingTracker(),
        policy,
        Metrics(),
        mark_done=lambda: None,
        bind={},
        failing=failing,
    )


def run(errors: list[BaseException], policy: RetryPolicy) -> tuple[Outcome, int, list[str]]:
    """Process one batch with a processor that raises `errors` in turn, then succeeds."""
    calls = 0
    reasons: list[str] = []

    async def process(batch: Any, tracker: Any) -> None:
        nonlocal calls
        calls += 1
        if calls <= len(errors):
            raise errors[calls - 1]

    async def nothing(*_: Any) -> None:
        return None

    processor = LoadedProcessor("scripted", nothing, process, nothing, None)

    async def go() -> Outcome:
        return await one_batch(processor, policy, failing=reasons.append)

    return anyio.run(go), calls, reasons


def test_other_errors_are_retried_up_to_max_attempts(tmp_path: Path) -> None:
    policy = RetryPolicy(
        max_attempts=3, on_failure="dead_letter", backoff=FAST, dead_letter_dir=tmp_path
    )
    outcome, calls, _ = run([ValueError("a"), ValueError("b")], policy)
    assert isinstance(outcome, Processed) and calls == 3
    outcome, calls, _ = run([ValueError(str(i)) for i in range(9)], policy)
    assert isinstance(outcome, DeadLettered) and calls == 3


@pytest.mark.parametrize(
    "error",
    [BatchRejected("400 Bad Request"), ExceptionGroup("task group", [BatchRejected("400")])],
    ids=["plain", "inside-a-task-group"],
)
def test_a_rejected_batch_is_dead_lettered_at_once(tmp_path: Path, error: Exception) -> None:
    policy = RetryPolicy(
        max_attempts=5, on_failure="dead_letter", backoff=FAST, dead_letter_dir=tmp_path
    )
    outcome, calls, reasons = run([error], policy)
    assert isinstance(outcome, DeadLettered) and calls == 1
    note = json.loads(outcome.path.with_suffix(".json").read_text())
    assert note["rejected"] is True and note["attempts"] == 1
    # the leaf, not "unhandled errors in a task group"
    assert note["error"].startswith("BatchRejected(") and "400" in note["error"]
    assert reasons[0].startswith("attempt 1 at cursor") and "BatchRejected" in reasons[0]


def test_a_rejected_batch_stops_the_shard_at_once() -> None:
    policy = RetryPolicy(max_attempts=5, on_failure="stop", backoff=FAST)
    outcome, calls, _ = run([BatchRejected("400")], policy)
    assert isinstance(outcome, ShardStopped) and calls == 1
    assert "rejected the batch" in outcome.reason and "400" in outcome.reason


def test_a_rejected_batch_is_still_retried_when_the_policy_says_retry() -> None:
    policy = RetryPolicy(max_attempts=1, on_failure="retry", backoff=FAST)
    outcome, calls, reasons = run([BatchRejected("400")] * 3, policy)
    assert isinstance(outcome, Processed) and calls == 4
    assert reasons[-1] == ""  # through: the shard's status no longer shows the failure


SLOW = Backoff(initial=60.0, cap=60.0, jitter=0.0)  # a wait no test sits through


def interrupted_run(
    *, stop_after_calls: int, error: BaseException, policy: RetryPolicy
) -> tuple[Outcome, int]:
    """A processor that always raises `error`; the shard's stop is set during call number
    `stop_after_calls` (0: before the first). An `Interrupted` batch must not be done."""
    calls = 0
    tracker = RecordingTracker()
    if stop_after_calls == 0:
        tracker.stopping.set()

    async def process(batch: Any, tracker: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == stop_after_calls:
            tracker.stopping.set()
        raise error

    async def nothing(*_: Any) -> None:
        return None

    processor = LoadedProcessor("scripted", nothing, process, nothing, None)

    async def go() -> Outcome:
        with anyio.fail_after(10):  # the 60 s backoff must not be waited out
            return await process_with_retry(
                processor,
                make_batch([{"id": "1"}], shard=2),
                tracker,
                policy,
                Metrics(),
                mark_done=done.set,
                bind={},
            )

    done = threading.Event()
    outcome = anyio.run(go)
    assert done.is_set() != isinstance(outcome, Interrupted)
    return outcome, calls


def test_the_attempt_that_succeeds_after_failed_ones_says_so_once() -> None:
    policy = RetryPolicy(backoff=FAST)  # on_failure = "retry", for ever
    with structlog.testing.capture_logs() as logs:
        outcome, calls, _ = run([ValueError("sink down")] * 3, policy)
    assert isinstance(outcome, Processed) and calls == 4
    events = [e["event"] for e in logs if e["event"].startswith("process_")]
    assert events == ["process_failed", "process_retry_scheduled"] * 3 + ["process_recovered"]
    [said] = [e for e in logs if e["event"] == "process_recovered"]
    assert said["failures"] == 3 and said["failing_for_s"] >= 0
    assert said["cursor"] == make_batch([{"id": "0"}], shard=2).cursor


def test_a_batch_through_at_once_says_nothing_of_recovering() -> None:
    with structlog.testing.capture_logs() as logs:
        outcome, calls, _ = run([], RetryPolicy(backoff=FAST))
    assert isinstance(outcome, Processed) and calls == 1
    assert not [e for e in logs if e["event"] == "process_recovered"]


def test_a_stop_ends_the_wait_between_attempts() -> None:
    outcome, calls = interrupted_run(
        stop_after_calls=2, error=ValueError("sink down"), policy=RetryPolicy(backoff=FAST)
    )
    assert isinstance(outcome, Interrupted) and calls == 2


def test_a_stop_during_a_long_backoff_interrupts_at_once() -> None:
    async def stop_soon(tracker: RecordingTracker) -> None:
        await anyio.sleep(0.05)
        tracker.stopping.set()

    tracker = RecordingTracker()
    calls = 0

    async def process(batch: Any, tracker: Any) -> None:
        nonlocal calls
        calls += 1
        raise ValueError("sink down")

    async def nothing(*_: Any) -> None:
        return None

    async def go() -> Outcome:
        async with anyio.create_task_group() as tg:
            tg.start_soon(stop_soon, tracker)
            with anyio.fail_after(10):
                return await process_with_retry(
                    LoadedProcessor("scripted", nothing, process, nothing, None),
                    make_batch([{"id": "1"}]),
                    tracker,
                    RetryPolicy(backoff=SLOW),
                    Metrics(),
                    mark_done=lambda: pytest.fail("not done"),
                    bind={},
                )

    assert isinstance(anyio.run(go), Interrupted) and calls == 1


@pytest.mark.parametrize(
    "error",
    [BatchInterrupted("stopping"), ExceptionGroup("task group", [BatchInterrupted("x")])],
    ids=["plain", "inside-a-task-group"],
)
def test_batch_interrupted_while_stopping_is_neither_done_nor_failed(
    tmp_path: Path, error: Exception
) -> None:
    policy = RetryPolicy(
        max_attempts=1, on_failure="dead_letter", backoff=SLOW, dead_letter_dir=tmp_path
    )
    outcome, calls = interrupted_run(stop_after_calls=1, error=error, policy=policy)
    assert isinstance(outcome, Interrupted) and calls == 1
    assert not list(tmp_path.rglob("*")), "an interrupted batch is not a dead letter"


def test_batch_interrupted_without_a_stop_is_an_ordinary_failure(tmp_path: Path) -> None:
    """A processor may not park a batch by raising it while nothing is stopping."""
    policy = RetryPolicy(
        max_attempts=2, on_failure="dead_letter", backoff=FAST, dead_letter_dir=tmp_path
    )
    outcome, calls = interrupted_run(
        stop_after_calls=-1, error=BatchInterrupted("no stop"), policy=policy
    )
    assert isinstance(outcome, DeadLettered) and calls == 2


def test_a_stop_set_before_the_batch_still_gets_one_attempt() -> None:
    """The batch in hand is tried once (it may well succeed); only retries are cut."""
    outcome, calls = interrupted_run(
        stop_after_calls=0, error=ValueError("down"), policy=RetryPolicy(backoff=SLOW)
    )
    assert isinstance(outcome, Interrupted) and calls == 1


@pytest.mark.parametrize(
    "raised",
    [SystemExit(3), KeyboardInterrupt(), asyncio.CancelledError()],
    ids=["SystemExit", "KeyboardInterrupt", "CancelledError"],
)
def test_a_plain_processor_raising_a_base_exception_is_a_failed_attempt(
    raised: BaseException,
) -> None:
    """Raised in the worker thread, it would end the daemon (or pass for a Ctrl-C, or a
    cancellation of the shard): it is a failure of that attempt, retried like any other."""
    calls = 0

    def process(batch: Any, tracker: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise raised

    processor = load_factory("plain", lambda shard: Plain(process)).processor(2)
    reasons: list[str] = []

    async def go() -> Outcome:
        return await one_batch(
            processor, RetryPolicy(max_attempts=3, backoff=FAST), failing=reasons.append
        )

    assert isinstance(anyio.run(go), Processed) and calls == 2
    assert "ProcessorCrashed" in reasons[0] and type(raised).__name__ in reasons[0]


class Plain:
    def __init__(self, process: Any) -> None:
        self.process = process

    def initialize(self, shard: int) -> None:
        pass

    def shutdown(self, tracker: Any) -> None:
        pass


def test_a_dead_letter_that_cannot_be_written_yet_is_retried_until_it_can(tmp_path: Path) -> None:
    """A brief problem with the directory (here: a file where the directory should be) does
    not stop the shard: the letter is written once it can be, and the batch set aside."""
    blocked = tmp_path / "dl"
    blocked.write_text("not a directory")
    policy = RetryPolicy(
        max_attempts=1, on_failure="dead_letter", backoff=FAST, dead_letter_dir=blocked
    )
    reasons: list[str] = []

    async def process(batch: Any, tracker: Any) -> None:
        raise ValueError("sink down")

    async def nothing(*_: Any) -> None:
        return None

    async def clear_the_way() -> None:
        while not any("cannot write the dead letter" in r for r in reasons):  # noqa: ASYNC110
            await anyio.sleep(0.001)
        blocked.unlink()

    async def go() -> Outcome:
        async with anyio.create_task_group() as tg:
            tg.start_soon(clear_the_way)
            outcome = await one_batch(
                LoadedProcessor("failing", nothing, process, nothing, None),
                policy,
                failing=reasons.append,
            )
        return outcome

    outcome = anyio.run(go)
    assert isinstance(outcome, DeadLettered) and outcome.path.exists()
    assert reasons[-1] == ""  # the shard's status no longer shows a failure


def test_a_stop_while_the_dead_letter_cannot_be_written_leaves_the_batch_unfinished(
    tmp_path: Path,
) -> None:
    blocked = tmp_path / "dl"
    blocked.write_text("not a directory")
    policy = RetryPolicy(
        max_attempts=1, on_failure="dead_letter", backoff=FAST, dead_letter_dir=blocked
    )
    tracker = RecordingTracker()

    async def process(batch: Any, tracker: Any) -> None:
        raise ValueError("sink down")

    async def nothing(*_: Any) -> None:
        return None

    def stop_on_the_letter_failure(reason: str) -> None:
        if "cannot write the dead letter" in reason:
            tracker.stopping.set()

    async def go() -> Outcome:
        return await one_batch(
            LoadedProcessor("failing", nothing, process, nothing, None),
            policy,
            failing=stop_on_the_letter_failure,
            tracker=tracker,
        )

    assert isinstance(anyio.run(go), Interrupted)
