"""Assignment: table-driven heartbeat sequences, then random answers against the invariants."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loghubd.consumer.assignment import Assignment, Diff

F = frozenset

# Steps: ("answer", shards, to_start, to_stop) | ("stopped", shard) | ("reset", to_stop);
# after every step, the expected report.
Step = tuple[Any, ...]

SCENARIOS: list[tuple[str, list[tuple[Step, list[int]]]]] = [
    ("join with nothing", [(("answer", [], [], []), [])]),
    ("first shards", [(("answer", [2, 0, 1], [0, 1, 2], []), [0, 1, 2])]),
    (
        "same answer again changes nothing",
        [
            (("answer", [0, 1], [0, 1], []), [0, 1]),
            (("answer", [1, 0], [], []), [0, 1]),
        ],
    ),
    ("duplicates in the answer", [(("answer", [3, 3], [3], []), [3])]),
    (
        "a shard taken away is still reported until stopped",
        [
            (("answer", [0, 1], [0, 1], []), [0, 1]),
            (("answer", [0], [], [1]), [0, 1]),
            (("answer", [0], [], []), [0, 1]),
            (("stopped", 1), [0]),
        ],
    ),
    (
        "answered again while stopping: started only after it stopped",
        [
            (("answer", [0, 1], [0, 1], []), [0, 1]),
            (("answer", [0], [], [1]), [0, 1]),
            (("answer", [0, 1], [], []), [0, 1]),
            (("stopped", 1), [0]),
            (("answer", [0, 1], [1], []), [0, 1]),
        ],
    ),
    (
        "grow and shrink at once",
        [
            (("answer", [0, 1], [0, 1], []), [0, 1]),
            (("answer", [1, 2], [2], [0]), [0, 1, 2]),
        ],
    ),
    (
        "a task that ends on its own lets the shard go",
        [
            (("answer", [4], [4], []), [4]),
            (("stopped", 4), []),
            (("answer", [4], [4], []), [4]),
        ],
    ),
    (
        "reset reports nothing and stops everything",
        [
            (("answer", [0, 1], [0, 1], []), [0, 1]),
            (("answer", [0], [], [1]), [0, 1]),
            (("reset", [0]), []),
        ],
    ),
    (
        "after reset a shard is not restarted before its old task stopped",
        [
            (("answer", [0, 1], [0, 1], []), [0, 1]),
            (("reset", [0, 1]), []),
            (("answer", [0, 1, 2], [2], []), [2]),
            (("stopped", 0), [2]),
            (("answer", [0, 1, 2], [0], []), [0, 2]),
            (("stopped", 1), [0, 2]),
            (("answer", [0, 1, 2], [1], []), [0, 1, 2]),
        ],
    ),
]


@pytest.mark.parametrize("steps", [pytest.param(s, id=n) for n, s in SCENARIOS])
def test_scenarios(steps: list[tuple[Step, list[int]]]) -> None:
    assignment = Assignment()
    for step, report in steps:
        match step:
            case ("answer", answer, to_start, to_stop):
                assert assignment.apply_answer(answer) == Diff(F(to_start), F(to_stop))
            case ("stopped", shard):
                assignment.stopped(shard)
            case ("reset", to_stop):
                assert assignment.reset() == Diff(F(), F(to_stop))
            case _:
                raise AssertionError(step)
        assert assignment.report() == report
        assert assignment.held == F(report)


def test_sets_are_exposed() -> None:
    assignment = Assignment()
    assignment.apply_answer([0, 1, 2])
    assignment.apply_answer([0])
    assignment.stopped(2)
    assert assignment.running == F({0})
    assert assignment.stopping == F({1})
    assignment.reset()
    assert assignment.running == F()
    assert assignment.stopping == F({0, 1})  # still finishing, though no longer reported
    assert assignment.held == F()


def test_stopped_unknown_shard_raises_and_changes_nothing() -> None:
    assignment = Assignment()
    assignment.apply_answer([0])
    with pytest.raises(ValueError, match="shard 7"):
        assignment.stopped(7)
    assert assignment.report() == [0]


def test_shard_filter() -> None:
    assignment = Assignment(shard_filter=F({1, 2}))
    assert assignment.shard_filter == F({1, 2})
    assert assignment.apply_answer([0, 1, 3]) == Diff(F({1}), F())
    assert assignment.report() == [1]
    assert assignment.apply_answer([2]) == Diff(F({2}), F({1}))
    assert assignment.report() == [1, 2]


@settings(max_examples=300, deadline=None)
@given(st.data(), st.none() | st.frozensets(st.integers(0, 5)))
def test_random_answers_and_stops(data: st.DataObject, shard_filter: frozenset[int] | None) -> None:
    assignment = Assignment(shard_filter)
    tasks: set[int] = set()  # shards with a live task, as the supervisor sees them
    winding_down: set[int] = set()  # told to stop since the last reset: still reported
    for _ in range(data.draw(st.integers(0, 30), label="steps")):
        choices = ["answer", "answer", "reset"] + (["stopped"] if tasks else [])
        kind = data.draw(st.sampled_from(choices))
        running, stopping = assignment.running, assignment.stopping
        if kind == "answer":
            answer = data.draw(st.lists(st.integers(0, 5), max_size=6))
            diff = assignment.apply_answer(answer)
            # never started while a task for it still exists
            assert not diff.to_start & (running | stopping)
            assert not diff.to_start & tasks
            assert diff.to_stop <= running
            assert not diff.to_start & diff.to_stop
            if shard_filter is not None:
                assert diff.to_start <= shard_filter
            tasks |= diff.to_start
            winding_down |= diff.to_stop
        elif kind == "reset":
            assert assignment.reset().to_stop == running
            assert assignment.report() == []
            winding_down.clear()
        else:
            shard = data.draw(st.sampled_from(sorted(tasks)))
            assignment.stopped(shard)
            tasks.discard(shard)
            winding_down.discard(shard)
        report = set(assignment.report())
        assert report >= assignment.running | winding_down
        assert report == assignment.held
        assert assignment.running | assignment.stopping == tasks
        assert not assignment.running & assignment.stopping
        if shard_filter is not None:
            assert report <= shard_filter
        assert assignment.report() == sorted(report)
