"""`query_start`: a query whose Python source process did not connect back in time is started
again, a bounded number of times; any other outcome is returned as it is. Fake queries and a
fake clock (the real thing: test_stream_e2e's late source process)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from loghubd_spark.query_start import (
    ATTEMPTS,
    WORKER_TIMEOUT,
    past_initializing,
    start_past_worker_timeout,
    worker_timed_out,
)

pytestmark = pytest.mark.spark

TIMEOUT = RuntimeError(
    "[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: "
    f"{WORKER_TIMEOUT}. SQLSTATE: XXKST\nCurrent State: INITIALIZING"
)
OTHER = RuntimeError("[STREAM_FAILED] ... ValueError: bad column")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s


@dataclass
class FakeQuery:
    """A query whose status messages follow `script`, one per look; after the script it is
    ended with `error` (None: done), or still running (`ends` False)."""

    script: list[str]
    error: BaseException | None = None
    ends: bool = True
    looks: int = 0

    @property
    def isActive(self) -> bool:
        return self.looks < len(self.script) or not self.ends

    @property
    def status(self) -> dict[str, object]:
        i = min(self.looks, len(self.script) - 1)
        self.looks += 1
        return {"message": self.script[i]}

    def exception(self) -> BaseException | None:
        return None if self.isActive else self.error


INIT = ["Initializing StreamExecution", "Initializing sources"]


class Signal:
    """A fake `stopping` event on the fake clock, set when `at` is reached (None: never)."""

    def __init__(self, clock: Clock, at: float | None) -> None:
        self.clock = clock
        self.at = at

    def is_set(self) -> bool:
        return self.at is not None and self.clock.now >= self.at

    def wait(self, timeout: float | None = None) -> bool:
        assert timeout is not None
        if self.at is not None:
            timeout = min(timeout, max(0.0, self.at - self.clock.now))
        self.clock.sleep(timeout)
        return self.is_set()


def starts(
    clock: Clock, *queries: FakeQuery, signal: Signal | None = None
) -> tuple[list[FakeQuery], list[str]]:
    """Run start_past_worker_timeout over `queries` in turn: (those started, lines said).
    With `signal`, the command's stop event (a fake one, on the fake clock)."""
    started: list[FakeQuery] = []
    said: list[str] = []

    def start() -> FakeQuery:
        started.append(queries[len(started)])
        return started[-1]

    got = start_past_worker_timeout(
        start,
        say=said.append,
        clock=clock,
        sleep=clock.sleep,
        init_timeout_s=60,
        stopping=signal,
    )
    assert got is started[-1]
    return started, said


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (None, False),
        (TIMEOUT, True),
        (OTHER, False),
        (RuntimeError("Python worker exited unexpectedly (crashed)"), False),
    ],
)
def test_only_the_connect_back_timeout_counts(error: BaseException | None, expected: bool) -> None:
    assert worker_timed_out(error) is expected


def test_a_query_past_its_sources_is_returned_at_once() -> None:
    clock = Clock()
    running = FakeQuery([*INIT, "Waiting for data to arrive"], ends=False)
    started, said = starts(clock, running)
    assert started == [running] and said == []


def test_a_timed_out_start_is_started_again_after_a_backoff_and_says_so() -> None:
    clock = Clock()
    first = FakeQuery(INIT, TIMEOUT)
    second = FakeQuery([*INIT, "Getting offsets from loghub"], ends=False)
    started, said = starts(clock, first, second)
    assert started == [first, second]
    assert len(said) == 1 and "(attempt 2 of 3)" in said[0] and "in 2 s" in said[0]
    assert 2.0 in clock.slept


def test_attempts_are_bounded_and_the_last_failure_is_returned() -> None:
    clock = Clock()
    queries = [FakeQuery(INIT, TIMEOUT) for _ in range(ATTEMPTS)]
    started, said = starts(clock, *queries)
    assert started == queries
    assert [line.split("(")[-1] for line in said] == ["attempt 2 of 3)", "attempt 3 of 3)"]
    assert started[-1].exception() is TIMEOUT


@pytest.mark.parametrize(
    "ending",
    [
        [f"Terminated with exception: {WORKER_TIMEOUT}"] * 5,
        ["Stopped"] * 5,
        [f"Terminated with exception: {WORKER_TIMEOUT}"],
    ],
    ids=["terminated-for-a-while", "stopped-for-a-while", "terminated-then-ended-at-once"],
)
def test_a_query_seen_ending_is_waited_for_and_then_started_again(ending: list[str]) -> None:
    """Spark says "Terminated with exception: ..." (or "Stopped") as the query ends, then stops
    its sources, and only then is the query no longer active. A look in between took it for a
    running query: a real run said "started", then "the query failed"."""
    clock = Clock()
    first = FakeQuery([INIT[-1], *ending], TIMEOUT)
    second = FakeQuery([*INIT, "Getting offsets from loghub"], ends=False)
    started, said = starts(clock, first, second)
    assert started == [first, second] and len(said) == 1


def test_a_query_ending_as_its_status_is_read_is_seen_ended() -> None:
    """Past "Initializing" when its status is read, ended by the look after."""
    clock = Clock()
    first = FakeQuery([INIT[-1], "Getting offsets from loghub"], TIMEOUT)
    second = FakeQuery([*INIT, "Getting offsets from loghub"], ends=False)
    started, said = starts(clock, first, second)
    assert started == [first, second] and len(said) == 1


@pytest.mark.parametrize(
    "query_end",
    [OTHER, None],
    ids=["another failure: returned, not retried", "done while starting (available-now)"],
)
def test_any_other_end_is_returned_as_it_is(query_end: BaseException | None) -> None:
    clock = Clock()
    ended = FakeQuery(INIT, query_end)
    started, said = starts(clock, ended)
    assert started == [ended] and said == []
    assert ended.exception() is query_end


def test_a_slow_initialisation_is_waited_for_then_left_running() -> None:
    clock = Clock()
    slow = FakeQuery(INIT, ends=False)  # initialising for ever
    assert past_initializing(slow, 5.0, clock=clock, sleep=clock.sleep) is True
    assert 5.0 <= clock.now < 5.5


def test_a_signal_during_the_backoff_ends_it_and_nothing_is_started_again() -> None:
    clock = Clock()
    first = FakeQuery(INIT, TIMEOUT)  # seen ended at 0.2 s; the back-off would end at 2.2 s
    second = FakeQuery([*INIT, "Getting offsets from loghub"], ends=False)
    started, said = starts(clock, first, second, signal=Signal(clock, 0.7))
    assert started == [first] and len(said) == 1  # the restart was announced, then cut short
    assert clock.now == pytest.approx(0.7)
    assert first.exception() is TIMEOUT


def test_a_signal_before_the_failure_is_seen_means_no_restart_is_announced() -> None:
    clock = Clock()
    first = FakeQuery(INIT[-1:], TIMEOUT)  # seen ended at 0.1 s, when the stop is asked for
    started, said = starts(clock, first, FakeQuery(INIT), signal=Signal(clock, 0.1))
    assert started == [first] and said == []
    assert first.exception() is TIMEOUT


def test_a_signal_while_initialising_returns_the_running_query_for_the_caller_to_stop() -> None:
    clock = Clock()
    slow = FakeQuery(INIT, ends=False)  # initialising for ever
    started, said = starts(clock, slow, signal=Signal(clock, 1.0))
    assert started == [slow] and said == [] and slow.isActive
    assert 1.0 <= clock.now < 1.2


def test_without_a_signal_the_backoff_runs_its_full_length() -> None:
    clock = Clock()
    first = FakeQuery(INIT, TIMEOUT)
    second = FakeQuery([*INIT, "Getting offsets from loghub"], ends=False)
    started, _ = starts(clock, first, second, signal=Signal(clock, None))  # never set
    assert started == [first, second]
    assert 2.0 in clock.slept


def test_a_query_stuck_ending_is_left_to_the_caller_at_a_signal_or_the_timeout() -> None:
    """Spark's stop of a query's sources can hang: the wait for the query to end is bounded
    like the wait for its start, and a signal ends it too."""
    stuck = [f"Terminated with exception: {WORKER_TIMEOUT}"]
    clock = Clock()
    query = FakeQuery(stuck, ends=False)  # ending for ever
    assert past_initializing(query, 5.0, clock=clock, sleep=clock.sleep) is True
    assert 5.0 <= clock.now < 5.5
    clock = Clock()
    query = FakeQuery(stuck, ends=False)
    started, said = starts(clock, query, signal=Signal(clock, 1.0))
    assert started == [query] and said == [] and query.isActive
    assert 1.0 <= clock.now < 1.2
