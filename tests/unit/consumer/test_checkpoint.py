"""CheckpointTracker: table-driven scenarios, then random interleavings against a model."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loghubd.consumer.checkpoint import BatchToken, CheckpointTracker

# Op DSL for the table: ("fetch", start, next) | ("done", i) | ("begin", i) | ("save", persist)
# | ("rollback", cursor) | ("committed", cursor) | ("unfinished", i) | ("defer",) (the current
# batch); i indexes the tokens returned by "fetch".
Op = tuple[Any, ...]


def run(ops: list[Op], initial: str = "a") -> CheckpointTracker:
    tracker = CheckpointTracker(initial)
    tokens: list[BatchToken] = []
    for op in ops:
        match op:
            case ("fetch", start, nxt):
                tokens.append(tracker.fetched(start, nxt))
            case ("done", i):
                tracker.done(tokens[i])
            case ("begin", i):
                tracker.begin(tokens[i])
            case ("save", persist):
                tracker.save_checkpoint(persist)
            case ("rollback", cursor):
                tracker.rollback(cursor)
            case ("committed", cursor):
                tracker.set_committed(cursor)
            case ("unfinished", i):
                tracker.left_unfinished(tokens[i])
            case ("defer",):
                tracker.defer()
            case _:
                raise AssertionError(op)
    return tracker


AB, BC, CD = ("fetch", "a", "b"), ("fetch", "b", "c"), ("fetch", "c", "d")

SCENARIOS: list[tuple[str, list[Op], str, str]] = [
    # name, ops, committable, fetch_cursor
    ("nothing fetched", [], "a", "a"),
    ("fetched, not done", [AB, BC], "a", "c"),
    ("first done", [AB, BC, ("done", 0)], "b", "c"),
    ("all done in order", [AB, BC, ("done", 0), ("done", 1)], "c", "c"),
    ("second done first: held back", [AB, BC, ("done", 1)], "a", "c"),
    ("out of order, then the gap closes", [AB, BC, CD, ("done", 2), ("done", 0)], "b", "d"),
    ("gap closes fully", [AB, BC, CD, ("done", 2), ("done", 1), ("done", 0)], "d", "d"),
    ("done twice is idempotent", [AB, ("done", 0), ("done", 0)], "b", "b"),
    ("empty batch at the end", [AB, ("fetch", "b", "b"), ("done", 0), ("done", 1)], "b", "b"),
    ("save covers current", [AB, BC, ("begin", 0), ("save", False)], "b", "c"),
    ("save covers earlier", [AB, BC, CD, ("begin", 1), ("save", False)], "c", "d"),
    ("save without current", [AB, ("save", True)], "a", "b"),
    ("rollback to a pending start", [AB, BC, CD, ("done", 2), ("rollback", "b")], "a", "b"),
    ("rollback keeps earlier state", [AB, BC, ("done", 0), ("rollback", "b")], "b", "b"),
    ("rollback forgets done later ones", [AB, BC, CD, ("done", 1), ("rollback", "b")], "a", "b"),
    ("rollback to committable", [AB, BC, ("done", 0), ("rollback", "b")], "b", "b"),
    ("rollback to fetch cursor: no-op", [AB, BC, ("done", 1), ("rollback", "c")], "a", "c"),
    (
        "rollback behind base moves back",
        [AB, BC, ("done", 0), ("done", 1), ("rollback", "a")],
        "a",
        "a",
    ),
    ("rollback to a fresh cursor", [AB, BC, ("rollback", "z")], "z", "z"),
    (
        "fetch after rollback",
        [AB, BC, ("rollback", "b"), ("fetch", "b", "x"), ("done", 0)],
        "b",
        "x",
    ),
    # a batch left unfinished (the shard stops with it in hand): a later save does not cover
    # it, but still covers the batches handed over before it
    (
        "unfinished: save covers it no more",
        [AB, ("begin", 0), ("unfinished", 0), ("save", True)],
        "a",
        "b",
    ),
    (
        "unfinished: save covers the ones before",
        [AB, BC, CD, ("begin", 0), ("begin", 1), ("unfinished", 1), ("save", True)],
        "b",
        "d",
    ),
    (
        "unfinished: save covers the ones handed over before, done or not",
        [
            AB,
            BC,
            CD,
            ("begin", 0),
            ("begin", 1),
            ("done", 1),
            ("begin", 2),
            ("unfinished", 2),
            ("save", True),
        ],
        "c",
        "d",
    ),
    (
        "unfinished of an earlier batch than current",
        [AB, BC, ("begin", 1), ("unfinished", 0), ("save", True)],
        "a",
        "c",
    ),
    (
        "unfinished of a later batch: current stays",
        [AB, BC, ("begin", 0), ("unfinished", 1), ("save", True)],
        "b",
        "c",
    ),
    # a deferred batch is finished by its Ack only (a plugin author lost data mixing the two)
    (
        "deferred: a later save does not cover it",
        [AB, BC, ("begin", 0), ("defer",), ("begin", 1), ("save", True)],
        "a",
        "c",
    ),
    (
        "deferred: its ack then folds both",
        [AB, BC, ("begin", 0), ("defer",), ("begin", 1), ("save", True), ("done", 0)],
        "c",
        "c",
    ),
    ("deferred then saved itself: done", [AB, ("begin", 0), ("defer",), ("save", True)], "b", "b"),
    (
        "deferred, rolled back and re-fetched: a save covers the new one",
        [
            AB,
            ("begin", 0),
            ("defer",),
            ("rollback", "a"),
            ("fetch", "a", "b"),
            ("begin", 1),
            ("save", True),
        ],
        "b",
        "b",
    ),
    ("stale done after rollback ignored", [AB, BC, ("rollback", "a"), ("done", 1)], "a", "a"),
    (
        "re-fetched batch counts, old token not",
        [AB, ("rollback", "a"), ("fetch", "a", "b"), ("done", 0)],
        "a",
        "b",
    ),
]


@pytest.mark.parametrize(
    ("ops", "committable", "fetch_cursor"),
    [pytest.param(o, c, f, id=n) for n, o, c, f in SCENARIOS],
)
def test_scenarios(ops: list[Op], committable: str, fetch_cursor: str) -> None:
    tracker = run(ops)
    assert tracker.committable() == committable
    assert tracker.get_checkpoint() == committable
    assert tracker.fetch_cursor == fetch_cursor


def test_fetch_must_continue_at_fetch_cursor() -> None:
    tracker = run([AB])
    with pytest.raises(ValueError, match="next fetch position"):
        tracker.fetched("c", "d")
    assert tracker.fetch_cursor == "b"  # refused, nothing changed
    assert tracker.in_flight == 1


def test_done_with_a_token_never_fetched() -> None:
    tracker = run([AB])
    with pytest.raises(ValueError, match="never fetched"):
        tracker.done(BatchToken(5, "x", "y"))


def test_done_with_another_trackers_token() -> None:
    tracker = run([AB])
    with pytest.raises(ValueError, match="not this tracker"):
        tracker.done(BatchToken(0, "q", "r"))
    assert tracker.committable() == "a"


def test_commit_bookkeeping() -> None:
    assert CheckpointTracker("a").committed is None
    tracker = CheckpointTracker("a")
    assert tracker.needs_commit()  # the server has nothing yet: record the start position
    tracker.set_committed("a")
    assert not tracker.needs_commit()
    token = tracker.fetched("a", "b")
    assert not tracker.needs_commit()
    tracker.done(token)
    assert tracker.needs_commit()
    tracker.set_committed("b")
    assert tracker.committed == "b"
    assert not tracker.needs_commit()


def test_known_checkpoint_needs_no_commit() -> None:
    assert not CheckpointTracker("a", committed="a").needs_commit()


def test_persist_raises_the_commit_request_once() -> None:
    tracker = CheckpointTracker("a")
    tracker.begin(tracker.fetched("a", "b"))
    tracker.save_checkpoint(persist=False)
    assert (tracker.commit_requested, tracker.take_commit_request()) == (False, False)
    tracker.save_checkpoint()
    assert tracker.commit_requested
    assert tracker.take_commit_request()
    assert not tracker.take_commit_request()
    assert tracker.committable() == "b"


def test_rollback_clears_a_forgotten_current_batch() -> None:
    tracker = CheckpointTracker("a")
    first = tracker.fetched("a", "b")
    second = tracker.fetched("b", "c")
    tracker.begin(second)
    tracker.rollback("b")
    tracker.save_checkpoint(persist=False)  # current was forgotten: covers nothing
    assert tracker.committable() == "a"
    tracker.begin(first)
    tracker.save_checkpoint(persist=False)
    assert tracker.committable() == "b"


# --- random interleavings against a model ------------------------------------------------------
# Cursors are "c<position>" so the test (not the tracker) can order them.


def pos(cursor: str) -> int:
    return int(cursor[1:])


@dataclass
class Model:
    tail: int = 0
    alive: list[BatchToken] = field(default_factory=list)  # not forgotten, in fetch order
    done: set[int] = field(default_factory=set)
    deferred: set[int] = field(default_factory=set)
    current: BatchToken | None = None

    def unfinished(self) -> list[BatchToken]:
        return [t for t in self.alive if t.seq not in self.done]

    def expected_committable(self) -> int:
        unfinished = self.unfinished()
        return pos(unfinished[0].start_cursor) if unfinished else self.tail

    def folded(self) -> int:
        n = 0
        while n < len(self.alive) and self.alive[n].seq in self.done:
            n += 1
        return n


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_random_interleavings(data: st.DataObject) -> None:
    tracker = CheckpointTracker("c0")
    model = Model()
    issued: list[BatchToken] = []
    previous = 0
    for _ in range(data.draw(st.integers(0, 40), label="steps")):
        kinds = ["fetch", "rollback", "save", "defer"]
        if issued:
            kinds += ["done", "done", "done", "begin", "unfinished"]
        kind = data.draw(st.sampled_from(kinds))
        rolled_back = False
        if kind == "fetch":
            width = data.draw(st.integers(0, 3))
            token = tracker.fetched(f"c{model.tail}", f"c{model.tail + width}")
            model.tail += width
            model.alive.append(token)
            issued.append(token)
        elif kind == "done":
            token = data.draw(st.sampled_from(issued))
            tracker.done(token)
            if token in model.alive:
                model.done.add(token.seq)
        elif kind == "begin":
            token = data.draw(st.sampled_from(issued))
            if token in model.alive:
                tracker.begin(token)
                model.current = token
        elif kind == "unfinished":
            token = data.draw(st.sampled_from(issued))
            tracker.left_unfinished(token)
            if model.current is not None and model.current.seq >= token.seq:
                earlier = [t for t in model.alive[model.folded() :] if t.seq < token.seq]
                model.current = earlier[-1] if earlier else None
        elif kind == "defer":
            tracker.defer()
            if model.current is not None:
                model.deferred.add(model.current.seq)
        elif kind == "save":
            persist = data.draw(st.booleans())
            tracker.save_checkpoint(persist)
            if model.current is not None:
                cur = model.current.seq
                model.done |= {
                    t.seq
                    for t in model.alive
                    if t.seq == cur or (t.seq < cur and t.seq not in model.deferred)
                }
            assert tracker.take_commit_request() == persist
        else:
            choices = [model.tail, model.expected_committable(), data.draw(st.integers(0, 60))]
            choices += [pos(t.start_cursor) for t in model.alive]
            target = data.draw(st.sampled_from(choices))
            tracker.rollback(f"c{target}")
            rolled_back = True
            if target != model.tail:
                k = model.folded()
                starts = [pos(t.start_cursor) for t in model.alive[k:]]
                cut = k + starts.index(target) if target in starts else 0
                model.alive = model.alive[:cut]
                model.tail = target
            if model.current not in model.alive:
                model.current = None

        committable = pos(tracker.committable())
        assert committable == model.expected_committable()
        assert tracker.fetch_cursor == f"c{model.tail}"
        # never past a batch that is not done
        assert all(committable <= pos(t.start_cursor) for t in model.unfinished())
        # only rollback moves it backwards
        if not rolled_back:
            assert committable >= previous
        previous = committable
