"""The consumer-group coordinator, table by table (h11's test_state style) and through the
reference document's scenarios, driven by a fake clock."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import pytest

from loghubd.server import coordinator as co
from loghubd.server.coordinator import (
    ALLOC,
    NOT_ALLOC,
    OVER,
    TRANSFER,
    WAIT,
    CheckpointCommitted,
    ConsumerLeft,
    Event,
    Group,
    GroupUpdated,
    HeartbeatReceived,
    IllegalTransition,
    NotOwner,
    Outcome,
    Refused,
    ShardEntry,
    ShardsAdded,
    ShardsDrained,
    ShardsRemoved,
    ShardState,
    Ticked,
    Transition,
    UnknownConsumer,
    UnknownConsumerWithShards,
    UnknownShard,
    counts,
    from_dict,
    new_group,
    step,
    to_dict,
)

TIMEOUT = 10.0


# --- shorthands for shard tables ------------------------------------------------------------


def wait(*parents: int) -> ShardEntry:
    return ShardEntry(WAIT, parents)


def free(*parents: int) -> ShardEntry:
    return ShardEntry(NOT_ALLOC, parents)


def alloc(owner: str, delivered: bool = True, parents: tuple[int, ...] = ()) -> ShardEntry:
    return ShardEntry(ALLOC, parents, owner=owner, delivered=delivered)


def xfer(owner: str, nxt: str, delivered: bool = True) -> ShardEntry:
    return ShardEntry(TRANSFER, owner=owner, next=nxt, delivered=delivered)


def over(*parents: int) -> ShardEntry:
    return ShardEntry(OVER, parents)


def group(
    shards: Mapping[int, ShardEntry],
    consumers: Mapping[str, float] | Iterable[str] = ("a",),
    order: bool = False,
) -> Group:
    """A group whose consumers heartbeated at t=0 unless times are given."""
    live = dict(consumers) if isinstance(consumers, Mapping) else dict.fromkeys(consumers, 0.0)
    return Group("g", TIMEOUT, order, live, dict(shards))


def hb(consumer: str, *held: int, now: float = 1.0) -> HeartbeatReceived:
    return HeartbeatReceived(consumer, frozenset(held), now)


def ckpt(shard: int, consumer: str, force: bool = False, at_end: bool = False) -> Event:
    return CheckpointCommitted(shard, consumer, force, at_end, 1.0)


def t(shard: int, number: int, frm: ShardState | None, to: ShardState) -> Transition:
    return Transition(shard, number, frm, to)


# --- the table itself -----------------------------------------------------------------------


def test_the_table_is_the_design_table() -> None:
    # DESIGN.md's nine edges, plus the documented sub-cases: 5 TRANSFER -> TRANSFER (re-target),
    # 8 from any state but OVER (the end committed by force, or before the shard became
    # read-only: the official consumers never commit an unchanged checkpoint again).
    assert dict(co.TRANSITIONS) == {
        (1, WAIT): {None},
        (1, NOT_ALLOC): {None},
        (2, NOT_ALLOC): {WAIT},
        (3, ALLOC): {NOT_ALLOC},
        (4, NOT_ALLOC): {TRANSFER},
        (5, TRANSFER): {ALLOC, TRANSFER},
        (6, ALLOC): {TRANSFER},
        (7, NOT_ALLOC): {OVER},
        (8, OVER): {ALLOC, NOT_ALLOC, TRANSFER, WAIT},
        (9, NOT_ALLOC): {ALLOC},
    }


ILLEGAL = [
    (number, frm, to)
    for (number, to), allowed in co.TRANSITIONS.items()
    for frm in [None, *ShardState]
    if frm not in allowed
]


@pytest.mark.parametrize(("number", "frm", "to"), ILLEGAL)
def test_move_refuses_every_edge_the_table_does_not_have(
    number: int, frm: ShardState | None, to: ShardState
) -> None:
    entries = {WAIT: wait(), NOT_ALLOC: free(), ALLOC: alloc("a"), TRANSFER: xfer("a", "b")}
    entries[OVER] = over()
    before = {} if frm is None else {0: entries[frm]}
    work = co._Work(TIMEOUT, False, {"a": 0.0, "b": 0.0}, dict(before))
    targets = {ALLOC: alloc("b"), TRANSFER: xfer("a", "b")}
    target = targets[to] if to in targets else ShardEntry(to)
    with pytest.raises(IllegalTransition) as info:
        work.move(0, number, target)
    assert (info.value.shard, info.value.number, info.value.to_state) == (0, number, to)
    assert work.shards == before
    assert work.transitions == []


def test_unknown_edge_number_is_illegal() -> None:
    work = co._Work(TIMEOUT, False, {"a": 0.0}, {0: free()})
    with pytest.raises(IllegalTransition):
        work.move(0, 4, alloc("a"))  # 4 leads to NOT_ALLOC only


@pytest.mark.parametrize(
    "kwargs",
    [
        {"state": ALLOC},
        {"state": NOT_ALLOC, "owner": "a"},
        {"state": TRANSFER, "owner": "a"},
        {"state": ALLOC, "owner": "a", "next": "b"},
        {"state": TRANSFER, "owner": "a", "next": "a"},
        {"state": OVER, "delivered": True},
    ],
)
def test_shard_entry_rejects_fields_that_do_not_fit_its_state(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=r"state|promised|delivered"):
        ShardEntry(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("entry", [alloc("z"), xfer("a", "z"), xfer("z", "a")])
def test_group_rejects_shards_held_by_consumers_that_are_not_live(entry: ShardEntry) -> None:
    with pytest.raises(ValueError, match="not live"):
        group({0: entry}, "a")


# --- every edge, table-driven: (before, event, whole shard table after, transitions, answer) --


@dataclass
class Case:
    id: str
    before: Group
    event: Event
    after: dict[int, ShardEntry]
    transitions: list[Transition]
    answer: tuple[int, ...] = ()
    consumers: set[str] | None = None  # live consumers after; None: unchanged
    changed: bool = True
    extra: dict[str, object] = field(default_factory=dict)


CASES = [
    # 1: a new shard is NOT_ALLOC, or WAIT in an ordered group while an ancestor is not OVER
    Case("1 unordered", group({}), ShardsAdded(((0, ()),), 1.0), {0: free()},
         [t(0, 1, None, NOT_ALLOC)]),
    Case("1 unordered child of a held shard", group({0: alloc("a")}),
         ShardsAdded(((1, (0,)), (2, (0,))), 1.0), {0: alloc("a"), 1: free(0), 2: free(0)},
         [t(1, 1, None, NOT_ALLOC), t(2, 1, None, NOT_ALLOC)]),
    Case("1 ordered, parent held", group({0: alloc("a")}, order=True),
         ShardsAdded(((1, (0,)),), 1.0), {0: alloc("a"), 1: wait(0)}, [t(1, 1, None, WAIT)]),
    Case("1 ordered, parent over", group({0: over()}, order=True),
         ShardsAdded(((1, (0,)),), 1.0), {0: over(), 1: free(0)}, [t(1, 1, None, NOT_ALLOC)]),
    Case("1 ordered, parent gone counts as over", group({}, order=True),
         ShardsAdded(((1, (0,)),), 1.0), {1: free(0)}, [t(1, 1, None, NOT_ALLOC)]),
    Case("1 ordered, grandparent not over", group({0: alloc("a"), 1: over(0)}, order=True),
         ShardsAdded(((2, (1,)),), 1.0), {0: alloc("a"), 1: over(0), 2: wait(1)},
         [t(2, 1, None, WAIT)]),
    Case("1 ordered merge, one parent not over", group({0: over(), 1: free()}, order=True),
         ShardsAdded(((2, (0, 1)),), 1.0), {0: over(), 1: free(), 2: wait(0, 1)},
         [t(2, 1, None, WAIT)]),
    # 2: WAIT -> NOT_ALLOC once every ancestor is OVER
    Case("8 then 2: the parent reaches its end", group({0: alloc("a"), 1: wait(0)}, order=True),
         ckpt(0, "a", at_end=True), {0: over(), 1: free(0)},
         [t(0, 8, ALLOC, OVER), t(1, 2, WAIT, NOT_ALLOC)]),
    Case("8, merge child still waits for its other parent",
         group({0: alloc("a"), 1: alloc("a"), 2: wait(0, 1)}, order=True),
         ckpt(0, "a", at_end=True), {0: over(), 1: alloc("a"), 2: wait(0, 1)},
         [t(0, 8, ALLOC, OVER)]),
    Case("2 after the parent is removed", group({0: alloc("a"), 1: wait(0)}, order=True),
         ShardsRemoved((0,), 1.0), {1: free(0)}, [t(1, 2, WAIT, NOT_ALLOC)]),
    Case("2 when order is switched off", group({0: alloc("a"), 1: wait(0)}, order=True),
         GroupUpdated(False, None, 1.0), {0: alloc("a"), 1: free(0)},
         [t(1, 2, WAIT, NOT_ALLOC)], extra={"order": False}),
    Case("order switched on affects only later shards", group({0: alloc("a"), 1: free(0)}),
         GroupUpdated(True, 30.0, 1.0), {0: alloc("a"), 1: free(0)}, [],
         extra={"order": True, "timeout": 30.0}),
    # 3: balancing gives a NOT_ALLOC shard to a live consumer
    Case("3 to the heartbeating consumer", group({0: free(), 1: free()}), hb("a"),
         {0: alloc("a"), 1: alloc("a")}, [t(0, 3, NOT_ALLOC, ALLOC), t(1, 3, NOT_ALLOC, ALLOC)],
         answer=(0, 1)),
    Case("3 to another consumer: not delivered yet", group({0: alloc("a"), 1: free()}, "ab"),
         hb("a", 0), {0: alloc("a"), 1: alloc("b", delivered=False)},
         [t(1, 3, NOT_ALLOC, ALLOC)], answer=(0,)),
    Case("3 the heartbeating consumer gets a free shard first, others get promises",
         group({0: alloc("c"), 1: alloc("c"), 2: alloc("c"), 3: free()}, "abc"), hb("b"),
         {0: alloc("c"), 1: alloc("c"), 2: xfer("c", "a"), 3: alloc("b")},
         [t(3, 3, NOT_ALLOC, ALLOC), t(2, 5, ALLOC, TRANSFER)], answer=(3,)),
    Case("sticky: a balanced group moves nothing (the ceil quota stays where it is)",
         group({0: alloc("a"), 1: alloc("b"), 2: alloc("c"), 3: alloc("c")}, "abc"),
         hb("a", 0), {0: alloc("a"), 1: alloc("b"), 2: alloc("c"), 3: alloc("c")}, [],
         answer=(0,), changed=False),
    Case("3 for a new consumer joining", group({0: free()}, ()), hb("a"), {0: alloc("a")},
         [t(0, 3, NOT_ALLOC, ALLOC)], answer=(0,), consumers={"a"}),
    # 4: a TRANSFER shard whose owner timed out
    Case("4 owner timed out", group({0: xfer("a", "b")}, {"a": 0.0, "b": 5.0}), Ticked(11.0),
         {0: free()}, [t(0, 4, TRANSFER, NOT_ALLOC)], consumers={"b"}),
    # 5: ALLOC -> TRANSFER, and the sub-case TRANSFER -> TRANSFER
    Case("5 a newcomer is promised the excess", group({0: alloc("a"), 1: alloc("a")}), hb("b"),
         {0: alloc("a"), 1: xfer("a", "b")}, [t(1, 5, ALLOC, TRANSFER)], consumers={"a", "b"}),
    Case("5 undelivered ALLOC is promised too, never handed over directly",
         group({0: alloc("a"), 1: alloc("a", delivered=False)}), hb("b"),
         {0: alloc("a"), 1: xfer("a", "b", delivered=False)}, [t(1, 5, ALLOC, TRANSFER)],
         consumers={"a", "b"}),
    Case("5 re-target: the promise moves to a less loaded consumer",
         group({0: alloc("a"), 1: alloc("a"), 2: xfer("a", "b"), 3: alloc("b")}, "ab"), hb("c"),
         {0: alloc("a"), 1: alloc("a"), 2: xfer("a", "c"), 3: alloc("b")},
         [t(2, 5, TRANSFER, TRANSFER)], consumers={"a", "b", "c"}),
    # 6: TRANSFER -> ALLOC
    Case("6 the owner let go: owner := next", group({0: alloc("a"), 1: xfer("a", "b")}, "ab"),
         hb("a", 0), {0: alloc("a"), 1: alloc("b", delivered=False)},
         [t(1, 6, TRANSFER, ALLOC)], answer=(0,)),
    Case("6 the owner still lists it: it stays promised",
         group({0: alloc("a"), 1: xfer("a", "b")}, "ab"), hb("a", 0, 1),
         {0: alloc("a"), 1: xfer("a", "b")}, [], answer=(0,), changed=False),
    Case("6 next timed out: the owner keeps it",
         group({0: alloc("a"), 1: xfer("a", "b")}, {"a": 5.0, "b": 0.0}), Ticked(11.0),
         {0: alloc("a"), 1: alloc("a")}, [t(1, 6, TRANSFER, ALLOC)], consumers={"a"}),
    Case("6 next timed out, seen in a heartbeat of the owner",
         group({0: alloc("a"), 1: xfer("a", "b")}, {"a": 5.0, "b": 0.0}), hb("a", 0, 1, now=11.0),
         {0: alloc("a"), 1: alloc("a")}, [t(1, 6, TRANSFER, ALLOC)], answer=(0, 1),
         consumers={"a"}),
    Case("6 balancing cancels a promise to a consumer that must give it up",
         group({0: alloc("a"), 1: xfer("a", "b"), 2: alloc("b"), 3: alloc("b")}, "ab"),
         hb("b", 2, 3), {0: alloc("a"), 1: alloc("a"), 2: alloc("b"), 3: alloc("b")},
         [t(1, 6, TRANSFER, ALLOC)], answer=(2, 3)),
    Case("6 the owner left: owner := next", group({0: xfer("a", "b")}, "ab"),
         ConsumerLeft("a", 1.0), {0: alloc("b", delivered=False)}, [t(0, 6, TRANSFER, ALLOC)],
         consumers={"b"}),
    Case("6 next left: the owner keeps it", group({0: xfer("a", "b")}, "ab"),
         ConsumerLeft("b", 1.0), {0: alloc("a")}, [t(0, 6, TRANSFER, ALLOC)], consumers={"a"}),
    # 7: OVER -> NOT_ALLOC by a forced checkpoint before the end
    Case("7 forced checkpoint before the end", group({0: over()}), ckpt(0, "zz", force=True),
         {0: free()}, [t(0, 7, OVER, NOT_ALLOC)]),
    Case("forced checkpoint at the end of an OVER shard: stays", group({0: over()}),
         ckpt(0, "a", force=True, at_end=True), {0: over()}, [], changed=False),
    # 8: ALLOC -> OVER
    Case("8 the owner commits the end", group({0: alloc("a")}), ckpt(0, "a", at_end=True),
         {0: over()}, [t(0, 8, ALLOC, OVER)]),
    Case("8 by force from anybody", group({0: alloc("a")}), ckpt(0, "x", True, True),
         {0: over()}, [t(0, 8, ALLOC, OVER)]),
    Case("8 the old owner of a TRANSFER commits the end: nobody gets it",
         group({0: xfer("a", "b")}, "ab"), ckpt(0, "a", at_end=True), {0: over()},
         [t(0, 8, TRANSFER, OVER)]),
    Case("8 the end forced on an unowned shard", group({0: free()}), ckpt(0, "x", True, True),
         {0: over()}, [t(0, 8, NOT_ALLOC, OVER)]),
    Case("8 the end forced on a WAIT shard",
         group({0: over(), 1: alloc("a", parents=(0,)), 2: wait(1)}, order=True),
         ckpt(2, "x", True, True), {0: over(), 1: alloc("a", parents=(0,)), 2: over(1)},
         [t(2, 8, WAIT, OVER)]),
    Case("8 split after the end was committed: drained at once", group({0: alloc("a")}),
         ShardsDrained((0,), 1.0), {0: over()}, [t(0, 8, ALLOC, OVER)]),
    Case("8 drained: an ordered group's children start",
         group({0: alloc("a"), 1: wait(0)}, order=True), ShardsDrained((0,), 1.0),
         {0: over(), 1: free(0)},
         [t(0, 8, ALLOC, OVER), t(1, 2, WAIT, NOT_ALLOC)]),
    Case("drained: unknown and OVER shards are ignored", group({0: over()}),
         ShardsDrained((0, 7), 1.0), {0: over()}, [], changed=False),
    Case("a checkpoint before the end changes nothing", group({0: alloc("a")}), ckpt(0, "a"),
         {0: alloc("a")}, [], changed=False),
    Case("the old owner of a TRANSFER may save progress", group({0: xfer("a", "b")}, "ab"),
         ckpt(0, "a"), {0: xfer("a", "b")}, [], changed=False),
    # 9: ALLOC -> NOT_ALLOC
    Case("9 owner timed out", group({0: alloc("a")}, {"a": 0.0, "b": 5.0}), Ticked(11.0),
         {0: free()}, [t(0, 9, ALLOC, NOT_ALLOC)], consumers={"b"}),
    Case("9 owner timed out, then 3 in the heartbeat of another",
         group({0: alloc("a"), 1: alloc("b")}, {"a": 0.0, "b": 5.0}), hb("b", 1, now=11.0),
         {0: alloc("b"), 1: alloc("b")}, [t(0, 9, ALLOC, NOT_ALLOC), t(0, 3, NOT_ALLOC, ALLOC)],
         answer=(0, 1), consumers={"b"}),
    Case("9 owner let go, then 3 to the consumer that may take one more",
         group({0: alloc("x"), 1: alloc("x"), 2: alloc("a"), 3: alloc("b")}, "abx"),
         hb("x", 1), {0: alloc("a", delivered=False), 1: alloc("x"), 2: alloc("a"), 3: alloc("b")},
         [t(0, 9, ALLOC, NOT_ALLOC), t(0, 3, NOT_ALLOC, ALLOC)], answer=(1,)),
    Case("9 the owner left", group({0: alloc("a"), 1: free()}, "ab"), ConsumerLeft("a", 1.0),
         {0: free(), 1: free()}, [t(0, 9, ALLOC, NOT_ALLOC)], consumers={"b"}),
    Case("an undelivered shard is not let go: its owner could not list it yet",
         group({0: alloc("a", delivered=False)}), hb("a"), {0: alloc("a")}, [], answer=(0,)),
    # no edge at all
    Case("shards held but not owned are ignored", group({0: alloc("a"), 1: alloc("b")}, "ab"),
         hb("a", 0, 1, 7), {0: alloc("a"), 1: alloc("b")}, [], answer=(0,), changed=False),
    Case("a consumer past its timeout but not yet expired is refreshed",
         group({0: alloc("a")}, {"a": 0.0}), hb("a", 0, now=50.0), {0: alloc("a")}, [],
         answer=(0,), changed=False),
    Case("WAIT and OVER are never handed out",
         group({0: wait(2), 1: over(), 2: alloc("b")}, "b", order=True), hb("a"),
         {0: wait(2), 1: over(), 2: alloc("b")}, [], consumers={"a", "b"}),
    Case("removing a shard is not an edge", group({0: alloc("a"), 1: over()}),
         ShardsRemoved((1, 9), 1.0), {0: alloc("a")}, []),
    Case("an unknown consumer leaving is a no-op", group({0: alloc("a")}),
         ConsumerLeft("zz", 1.0), {0: alloc("a")}, [], changed=False),
    Case("a tick with nobody timed out", group({0: alloc("a")}), Ticked(10.0), {0: alloc("a")},
         [], changed=False),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_edges(case: Case) -> None:
    snapshot = to_dict(case.before)
    out = step(case.before, case.event)
    assert dict(out.group.shards) == case.after
    assert list(out.transitions) == case.transitions
    assert out.answer == case.answer
    expected_consumers = set(case.before.consumers) if case.consumers is None else case.consumers
    assert set(out.group.consumers) == expected_consumers
    assert out.changed is case.changed
    for attr, value in case.extra.items():
        assert getattr(out.group, attr) == value
    assert to_dict(case.before) == snapshot  # the input group is never changed


# --- refusals: distinct from IllegalTransition, and they change nothing --------------------

REFUSALS = [
    ("heartbeat with shards from a consumer never seen", group({0: alloc("a")}), hb("z", 0),
     UnknownConsumerWithShards),
    ("heartbeat with shards from an expired consumer", group({0: free()}, ()), hb("a", 3),
     UnknownConsumerWithShards),
    ("checkpoint on an unknown shard", group({0: alloc("a")}), ckpt(5, "a"), UnknownShard),
    ("forced checkpoint on an unknown shard", group({}), ckpt(5, "a", True, True), UnknownShard),
    ("fenced checkpoint from an unknown consumer", group({0: alloc("a")}), ckpt(0, "z"),
     UnknownConsumer),
    ("fenced checkpoint from a live non-owner", group({0: alloc("a")}, "ab"), ckpt(0, "b"),
     NotOwner),
    ("fenced checkpoint from the next of a TRANSFER", group({0: xfer("a", "b")}, "ab"),
     ckpt(0, "b", at_end=True), NotOwner),
    ("fenced checkpoint on a NOT_ALLOC shard", group({0: free()}), ckpt(0, "a"), NotOwner),
    ("fenced checkpoint on an OVER shard", group({0: over()}), ckpt(0, "a"), NotOwner),
    ("fenced checkpoint on a WAIT shard", group({0: wait()}), ckpt(0, "a", at_end=True),
     NotOwner),
]  # fmt: skip


@pytest.mark.parametrize(
    ("before", "event", "error"), [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS]
)
def test_refusals(before: Group, event: Event, error: type[Refused]) -> None:
    snapshot = to_dict(before)
    with pytest.raises(error):
        step(before, event)
    assert to_dict(before) == snapshot
    assert not issubclass(error, IllegalTransition)


def test_a_refused_consumer_rejoins_with_an_empty_heartbeat() -> None:
    g = group({0: free()}, ())
    with pytest.raises(UnknownConsumerWithShards):
        step(g, hb("a", 0))
    assert step(g, hb("a")).answer == (0,)


def test_adding_an_existing_shard_is_illegal_and_changes_nothing() -> None:
    g = group({0: alloc("a")})
    snapshot = to_dict(g)
    with pytest.raises(IllegalTransition) as info:
        step(g, ShardsAdded(((5, ()), (0, ())), 1.0))  # 5 would be fine, 0 is not
    assert (info.value.shard, info.value.number, info.value.from_state) == (0, 1, ALLOC)
    assert to_dict(g) == snapshot
    assert dict(g.shards) == {0: alloc("a")}


def test_step_returns_read_only_mappings() -> None:
    out = step(group({0: free()}), hb("a"))
    with pytest.raises(TypeError):
        out.group.shards[1] = free()  # type: ignore[index]
    with pytest.raises(TypeError):
        out.group.consumers["b"] = 0.0  # type: ignore[index]


def test_changed_ignores_heartbeat_times_only() -> None:
    g = step(group({0: free()}), hb("a", now=1.0)).group
    same = step(g, hb("a", 0, now=2.0))
    assert not same.changed
    assert same.group.consumers == {"a": 2.0}
    assert step(g, hb("b", now=2.0)).changed  # a new member


def test_counts_include_promises() -> None:
    g = group({0: alloc("a"), 1: xfer("a", "b"), 2: free(), 3: over()}, "abc")
    assert counts(g) == {"a": 1, "b": 1, "c": 0}


def test_to_dict_from_dict_round_trip() -> None:
    g = group(
        {0: over(), 1: alloc("a", parents=(0,)), 2: xfer("a", "b", delivered=False), 3: wait(1)},
        {"a": 3.0, "b": 4.0},
        order=True,
    )
    d = json.loads(json.dumps(to_dict(g)))
    back = from_dict(d, now=100.0)
    assert back == Group("g", TIMEOUT, True, {"a": 100.0, "b": 100.0}, dict(g.shards))
    assert to_dict(back) == d
    # a restarted server gives known consumers a fresh lease instead of dropping them
    assert step(back, Ticked(105.0)).group.consumers.keys() == {"a", "b"}


def test_new_group_is_empty() -> None:
    g = new_group("g", 20.0, True)
    assert (g.name, g.timeout, g.order, dict(g.consumers), dict(g.shards)) == (
        "g", 20.0, True, {}, {},
    )  # fmt: skip


# --- reference scenarios ---------------------------------------------------------------------


class Cluster:
    """A group plus well-behaved clients and a fake clock (a float we advance).

    A client heartbeats with exactly the shards it was last answered: it lets go at once of
    what it is no longer answered, and lists what it is newly answered.
    """

    def __init__(self, shards: int = 0, order: bool = False) -> None:
        self.now = 0.0
        self.group = new_group("g", TIMEOUT, order)
        self.answers: dict[str, tuple[int, ...]] = {}
        self.steps = 0
        self.first_answered: dict[int, int] = {}  # shard -> step
        self.over_at: dict[int, int] = {}
        if shards:
            self.send(ShardsAdded(tuple((s, ()) for s in range(shards)), self.now))

    def send(self, event: Event) -> Outcome:
        out = step(self.group, event)
        self.group, self.steps = out.group, self.steps + 1
        for tr in out.transitions:
            if tr.to_state is OVER:
                self.over_at[tr.shard] = self.steps
        if isinstance(event, HeartbeatReceived):
            self.answers[event.consumer] = out.answer
            for s in out.answer:
                self.first_answered.setdefault(s, self.steps)
        return out

    def heartbeat(self, consumer: str) -> Outcome:
        held = frozenset(self.answers.get(consumer, ()))
        return self.send(HeartbeatReceived(consumer, held, self.now))

    def round(self, *consumers: str) -> bool:
        """Everyone heartbeats once; True when nothing moved."""
        outs = [self.heartbeat(c) for c in consumers or sorted(self.group.consumers)]
        return not any(o.transitions for o in outs)

    def settle(self, *consumers: str) -> None:
        for _ in range(10):
            if self.round(*consumers) and self.round(*consumers):
                return
        raise AssertionError("no steady state after 10 rounds")

    def finish(self, shard: int) -> None:
        """The owner reaches the end of a read-only shard and commits it."""
        owner = self.group.shards[shard].owner
        assert owner is not None
        self.send(CheckpointCommitted(shard, owner, False, True, self.now))

    def holdings(self) -> dict[str, int]:
        """How many shards each live consumer is consuming (its last answer)."""
        return {c: len(self.answers.get(c, ())) for c in sorted(self.group.consumers)}

    def assert_steady(self) -> None:
        """No promise pending, nothing unassigned, answers are disjoint and cover every
        consumable shard."""
        states = {e.state for e in self.group.shards.values()}
        assert TRANSFER not in states
        assert NOT_ALLOC not in states
        answered = [s for c in self.group.consumers for s in self.answers.get(c, ())]
        assert len(answered) == len(set(answered))
        consumable = {s for s, e in self.group.shards.items() if e.state is ALLOC}
        assert set(answered) == consumable
        assert counts(self.group) == self.holdings()


def test_scenario_ten_shards_three_consumers_failover_and_growth() -> None:
    c = Cluster(shards=10)
    for name in "ABC":  # they join one by one
        c.heartbeat(name)
    c.settle()
    c.assert_steady()
    assert sorted(c.holdings().values()) == [3, 3, 4]

    # A dies: B and C take over A's shards
    lost = c.answers["A"]
    c.now += 6
    c.round("B", "C")
    c.now += 6  # A silent for 12 s > 10 s
    out = c.heartbeat("B")
    assert {t.shard for t in out.transitions if t.number == 9} == set(lost)
    c.settle("B", "C")
    c.assert_steady()
    assert c.holdings() == {"B": 5, "C": 5}

    # A comes back: its stale heartbeat is refused, it rejoins empty, and gets its share
    with pytest.raises(UnknownConsumerWithShards):
        c.heartbeat("A")
    c.answers["A"] = ()
    c.heartbeat("A")
    c.settle()
    c.assert_steady()
    assert sorted(c.holdings().values()) == [3, 3, 4]

    # D and E join: 2 each
    c.heartbeat("D")
    c.heartbeat("E")
    c.settle()
    c.assert_steady()
    assert c.holdings() == dict.fromkeys("ABCDE", 2)


def test_scenario_transfer_waits_for_the_owner_to_let_go() -> None:
    c = Cluster(shards=4)
    c.heartbeat("A")
    assert c.answers["A"] == (0, 1, 2, 3)
    out = c.heartbeat("B")
    assert out.answer == ()  # promised, not handed over
    assert counts(c.group) == {"A": 2, "B": 2}
    promised = {s for s, e in c.group.shards.items() if e.state is TRANSFER}
    c.heartbeat("B")
    assert c.answers["B"] == ()  # A has not let go yet
    c.heartbeat("A")  # A still lists them (its last answer), and is told to drop them
    assert set(c.answers["A"]).isdisjoint(promised)
    c.heartbeat("B")
    assert c.answers["B"] == ()  # A listed them in its latest heartbeat
    c.heartbeat("A")  # now A lets go
    assert c.heartbeat("B").answer == tuple(sorted(promised))
    c.assert_steady()


def test_scenario_split_and_merge_rebalance_on_the_new_shard_set() -> None:
    c = Cluster(shards=10)
    for name in "ABCDE":
        c.heartbeat(name)
    c.settle()
    assert c.holdings() == dict.fromkeys("ABCDE", 2)

    c.send(ShardsAdded(((10, (0,)), (11, (0,))), c.now))  # split 0 -> 10, 11
    c.send(ShardsAdded(((12, (1, 2)),), c.now))  # merge 1, 2 -> 12
    c.settle()
    c.assert_steady()
    assert sorted(c.holdings().values()) == [2, 2, 3, 3, 3]  # 13 shards, parents still readable

    for parent in (0, 1, 2):  # the read-only parents are drained
        c.finish(parent)
    c.settle()
    c.assert_steady()
    assert c.holdings() == dict.fromkeys("ABCDE", 2)
    current = {s for answer in c.answers.values() for s in answer}
    assert current == set(range(3, 13))


def test_scenario_drained_read_only_shards_rebalance_the_rest() -> None:
    c = Cluster(shards=10)
    for name in "ABC":
        c.heartbeat(name)
    c.settle()
    # shards 0-4 become read-only (say, after splits) and are consumed to their end
    for s in range(5):
        c.finish(s)
    assert {s for s, e in c.group.shards.items() if e.state is OVER} == set(range(5))
    c.settle()
    c.assert_steady()
    assert sorted(c.holdings().values()) == [1, 2, 2]
    assert {s for a in c.answers.values() for s in a} == set(range(5, 10))
    # the drained shards' data expires later: the group just forgets them
    out = c.send(ShardsRemoved(tuple(range(5)), c.now))
    assert out.transitions == ()
    assert set(c.group.shards) == set(range(5, 10))


def test_scenario_ordered_group_consumes_one_hash_key_in_write_order() -> None:
    # Hash key 7 is written to shard 0; 0 splits into 3 and 4 and key 7 goes to 4; 1 and 2
    # merge into 5; 4 and 5 merge into 6 and key 7 goes to 6. Consumption must follow 0, 4, 6.
    c = Cluster(shards=3, order=True)
    for name in "AB":
        c.heartbeat(name)
    c.settle()
    assert 0 in c.first_answered

    c.send(ShardsAdded(((3, (0,)), (4, (0,))), c.now))
    c.send(ShardsAdded(((5, (1, 2)),), c.now))
    assert {s: c.group.shards[s].state for s in (3, 4, 5)} == dict.fromkeys((3, 4, 5), WAIT)
    c.settle()
    assert 4 not in c.first_answered  # 0 is not consumed yet

    c.finish(0)
    c.settle()
    assert 4 in c.first_answered
    assert 5 not in c.first_answered  # 1 and 2 are not consumed yet

    c.send(ShardsAdded(((6, (4, 5)),), c.now))
    assert c.group.shards[6].state is WAIT
    c.finish(1)
    c.finish(2)
    c.settle()
    assert 5 in c.first_answered
    c.finish(4)
    c.settle()
    assert 6 not in c.first_answered  # 5 is not consumed yet
    c.finish(5)
    c.settle()
    c.assert_steady()

    first, done = c.first_answered, c.over_at
    assert first[0] < done[0] < first[4] < done[4] < first[6]
    assert done[5] < first[6]
    # and in general: no shard was handed out before every ancestor was drained
    for shard, entry in c.group.shards.items():
        for parent in entry.parents:
            assert done[parent] < first[shard]
    assert sorted(c.holdings().values()) == [1, 1]  # 3 and 6 are what is left
