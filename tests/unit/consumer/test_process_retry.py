"""A failing batch follows the failure policy (`process_with_retry`): retried up to
`max_attempts`, then set aside or the shard stopped; a `BatchRejected` (retrying cannot help)
gets the policy at once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from loghubd import BatchRejected
from loghubd.backoff import Backoff
from loghubd.consumer.processing import (
    DeadLettered,
    Outcome,
    Processed,
    RetryPolicy,
    ShardStopped,
    process_with_retry,
)
from loghubd.ops.metrics import Metrics
from loghubd.plugins.loaded import LoadedProcessor
from loghubd.testing import RecordingTracker, make_batch

FAST = Backoff(initial=0.001, cap=0.002, jitter=0.0)


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
    batch = make_batch([{"id": str(i)} for i in range(3)], shard=2)

    async def go() -> Outcome:
        return await process_with_retry(
            processor,
            batch,
            RecordingTracker(),
            policy,
            Metrics(),
            mark_done=lambda: None,
            bind={},
            failing=reasons.append,
        )

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
