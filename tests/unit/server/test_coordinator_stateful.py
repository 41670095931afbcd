"""The consumer-group coordinator under random sequences of events (hypothesis stateful).

Clients are modelled like real ones: a client heartbeats with the shards it was last answered
plus, if it likes, some it is still shutting down (held before, no longer answered); once it
stops listing a shard it has let it go for good. A refused client drops everything.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import event as record
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from loghubd.server.coordinator import (
    ALLOC,
    NOT_ALLOC,
    OVER,
    TRANSFER,
    TRANSITIONS,
    WAIT,
    CheckpointCommitted,
    ConsumerLeft,
    Event,
    Group,
    HeartbeatReceived,
    NotOwner,
    Outcome,
    Refused,
    ShardEntry,
    ShardsAdded,
    ShardsDrained,
    ShardsRemoved,
    Ticked,
    UnknownConsumer,
    UnknownConsumerWithShards,
    UnknownShard,
    counts,
    new_group,
    step,
    to_dict,
)

NAMES = ("a", "b", "c", "d", "e")
TIMEOUT = 10.0
MAX_SHARDS = 16


@dataclass(frozen=True)
class Client:
    answer: frozenset[int] = frozenset()  # what it was last answered: it consumes these
    stopping: frozenset[int] = frozenset()  # held, no longer answered: still shutting down
    held: frozenset[int] = frozenset()  # what its latest heartbeat listed


def subsets(shards: frozenset[int], max_size: int | None = None) -> st.SearchStrategy[set[int]]:
    if not shards:
        return st.just(set())
    return st.sets(st.sampled_from(sorted(shards)), max_size=max_size)


def ancestors(group: Group, shard: int) -> set[int]:
    """Ancestors still known to the group."""
    found: set[int] = set()
    todo = list(group.shards[shard].parents)
    while todo:
        p = todo.pop()
        if p in group.shards and p not in found:
            found.add(p)
            todo.extend(group.shards[p].parents)
    return found


class CoordinatorMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.group = new_group("g", TIMEOUT, False)
        self.clients = dict.fromkeys(NAMES, Client())
        self.next_id = 0
        self.read_only: set[int] = set()
        # A forced checkpoint that moves an OVER shard back (7) is documented as dangerous: a
        # consumer that was consuming it may still do so. Those (shard, consumer) pairs are
        # exempt from the hand-over check until the consumer stops listing the shard.
        self.excused: dict[int, set[str]] = {}
        self.forced_back: set[int] = set()

    # --- plumbing ---------------------------------------------------------------------------

    def send(self, event: Event) -> Outcome:
        before = self.group
        snapshot = (to_dict(before), dict(before.consumers))
        try:
            out = step(before, event)
        finally:  # the input is never changed, whether the step succeeds or raises
            assert (to_dict(before), dict(before.consumers)) == snapshot
        assert out.changed == (to_dict(out.group) != snapshot[0])
        for tr in out.transitions:
            assert tr.from_state in TRANSITIONS[(tr.number, tr.to_state)]
            record(f"edge {tr.number}")
            if tr.number == 7:
                self.forced_back.add(tr.shard)
                self.excused[tr.shard] = {
                    n for n, cl in self.clients.items() if tr.shard in cl.held | cl.answer
                }
        self.group = out.group
        return out

    def beat(self, name: str, held: frozenset[int]) -> None:
        """One heartbeat, with every check on its answer."""
        if name not in self.group.consumers and held:
            with pytest.raises(UnknownConsumerWithShards):
                self.send(HeartbeatReceived(name, held, self.now))
            self.clients[name] = Client()  # it drops everything and rejoins with []
            return
        out = self.send(HeartbeatReceived(name, held, self.now))
        answer = frozenset(out.answer)
        g = self.group
        # Rule 4: exactly the ALLOC shards it owns, sorted, now delivered
        mine = [s for s, e in sorted(g.shards.items()) if e.state is ALLOC and e.owner == name]
        assert list(out.answer) == mine
        assert all(g.shards[s].state not in (WAIT, OVER) for s in answer)
        assert all(g.shards[s].delivered for s in mine)
        for s in answer - self.clients[name].answer:  # newly handed to `name`
            for other, cl in self.clients.items():
                if other != name and other in g.consumers and s in cl.held:
                    assert other in self.excused.get(s, set()), (
                        f"shard {s} answered to {name} while {other} still lists it"
                    )
            if g.order and s not in self.forced_back:
                # A forced-back shard itself is exempt: it may have been drained (8) while
                # WAIT, and 7 puts it back NOT_ALLOC whatever its ancestors are.
                for p in ancestors(g, s):
                    assert g.shards[p].state is OVER or p in self.forced_back, (s, p)
        for s, names in self.excused.items():
            if s not in held:
                names.discard(name)
        self.clients[name] = Client(answer, held - answer, held)
        # Rule 6: a heartbeat leaves the group balanced, with nothing unassigned
        loads = counts(g).values()
        assert max(loads) - min(loads) <= 1
        assert all(e.state is not NOT_ALLOC for e in g.shards.values())

    def add(self, parents: tuple[int, ...], children: int) -> None:
        new = tuple((self.next_id + i, parents) for i in range(children))
        self.next_id += children
        self.read_only.update(parents)
        out = self.send(ShardsAdded(new, self.now))
        assert [tr.number for tr in out.transitions] == [1] * children

    def writable(self) -> list[int]:
        return [s for s in sorted(self.group.shards) if s not in self.read_only]

    # --- rules ------------------------------------------------------------------------------

    @initialize(order=st.booleans(), shards=st.integers(1, 6))
    def create(self, order: bool, shards: int) -> None:
        self.group = new_group("g", TIMEOUT, order)
        self.add((), shards)

    @rule(name=st.sampled_from(NAMES), data=st.data())
    def heartbeat(self, name: str, data: st.DataObject) -> None:
        """Lists its last answer and maybe some shards it is still shutting down; now and then
        it gives up a shard it was answered (a processor stopped it)."""
        cl = self.clients[name]
        keep = data.draw(subsets(cl.stopping))
        dropped = data.draw(subsets(cl.answer, max_size=1)) if data.draw(st.booleans()) else set()
        self.beat(name, (cl.answer - dropped) | keep)

    @rule(name=st.sampled_from(NAMES))
    def join(self, name: str) -> None:
        """A fresh process under this name (a restart, maybe within the timeout)."""
        self.clients[name] = Client()
        self.beat(name, frozenset())

    @rule(name=st.sampled_from(NAMES))
    def leave(self, name: str) -> None:
        live = name in self.group.consumers
        out = self.send(ConsumerLeft(name, self.now))
        assert out.changed is live
        assert name not in self.group.consumers
        self.clients[name] = Client()

    @rule(dt=st.sampled_from([0.5, 3.0, 6.0, TIMEOUT + 1.0]))
    def advance(self, dt: float) -> None:
        self.now += dt

    @rule()
    def tick(self) -> None:
        fresh = {c for c, last in self.group.consumers.items() if self.now - last <= TIMEOUT}
        out = self.send(Ticked(self.now))
        assert set(self.group.consumers) == fresh
        assert all(tr.number in (2, 4, 6, 9) for tr in out.transitions)

    @precondition(lambda self: len(self.group.shards) < MAX_SHARDS)
    @rule(data=st.data())
    def split(self, data: st.DataObject) -> None:
        if parents := self.writable():
            self.add((data.draw(st.sampled_from(parents)),), 2)

    @precondition(lambda self: len(self.group.shards) < MAX_SHARDS)
    @rule(data=st.data())
    def merge(self, data: st.DataObject) -> None:
        if len(parents := self.writable()) >= 2:
            pair = data.draw(
                st.lists(st.sampled_from(parents), min_size=2, max_size=2, unique=True)
            )
            self.add((pair[0], pair[1]), 1)

    @rule(data=st.data())
    def expire_read_only(self, data: st.DataObject) -> None:
        """A read-only shard's data expired: the shard is deleted."""
        if gone := sorted(self.read_only & set(self.group.shards)):
            shard = data.draw(st.sampled_from(gone))
            out = self.send(ShardsRemoved((shard,), self.now))
            assert shard not in self.group.shards
            assert all(tr.number == 2 for tr in out.transitions)

    @rule(data=st.data())
    def finish(self, data: st.DataObject) -> None:
        """The owner reaches the end of a read-only shard it holds and commits it."""
        g = self.group
        done = [s for s in sorted(self.read_only & set(g.shards)) if g.shards[s].state is ALLOC]
        if done:
            shard = data.draw(st.sampled_from(done))
            owner = g.shards[shard].owner
            assert owner is not None
            out = self.send(CheckpointCommitted(shard, owner, False, True, self.now))
            assert out.transitions[0].number == 8
            assert all(tr.number == 2 for tr in out.transitions[1:])

    @rule(data=st.data())
    def drained(self, data: st.DataObject) -> None:
        """A split or merge made shards read-only whose end the group had already committed
        (the server finds them; the official consumers never commit that end again)."""
        g = self.group
        candidates = [*sorted(self.read_only & set(g.shards)), 999]
        shards = tuple(data.draw(st.lists(st.sampled_from(candidates), max_size=3, unique=True)))
        before = {s: g.shards[s] for s in shards if s in g.shards}
        out = self.send(ShardsDrained(shards, self.now))
        assert all(self.group.shards[s].state is OVER for s in before)
        moved = [tr.shard for tr in out.transitions if tr.number == 8]
        assert moved == [s for s in shards if s in before and before[s].state is not OVER]
        assert all(tr.number in (2, 8) for tr in out.transitions)

    @rule(data=st.data(), consumer=st.sampled_from(NAMES))
    def rewind(self, data: st.DataObject, consumer: str) -> None:
        """An operator forces a drained shard's checkpoint back before its end (7)."""
        drained = [s for s, e in sorted(self.group.shards.items()) if e.state is OVER]
        if drained:
            shard = data.draw(st.sampled_from(drained))
            out = self.send(CheckpointCommitted(shard, consumer, True, False, self.now))
            assert [tr.number for tr in out.transitions] == [7]

    @rule(data=st.data(), force=st.booleans())
    def checkpoint(self, data: st.DataObject, force: bool) -> None:
        shard = data.draw(st.sampled_from([*sorted(self.group.shards), 999]))
        entry = self.group.shards.get(shard)
        owners = [entry.owner] if entry is not None and entry.owner is not None else []
        consumer = data.draw(st.sampled_from([*owners, *NAMES]))
        at_end = shard in self.read_only and data.draw(st.booleans())
        event = CheckpointCommitted(shard, consumer, force, at_end, self.now)
        expected: type[Refused] | None = None
        if entry is None:
            expected = UnknownShard
        elif not force and consumer not in self.group.consumers:
            expected = UnknownConsumer
        elif not force and (entry.state not in (ALLOC, TRANSFER) or entry.owner != consumer):
            expected = NotOwner
        if expected is not None:
            with pytest.raises(expected):
                self.send(event)
            return
        assert entry is not None
        out = self.send(event)
        after = self.group.shards[shard]
        if at_end and entry.state is not OVER:
            assert after == ShardEntry(OVER, entry.parents)
        elif not at_end and entry.state is OVER and force:
            assert after == ShardEntry(NOT_ALLOC, entry.parents)
        else:
            assert after == entry
            assert out.transitions == ()

    @rule()
    def settle(self) -> None:
        """Two full rounds of well-behaved heartbeats (held = last answer) at one instant."""
        self.send(Ticked(self.now))  # membership changes (expiries) happen here, not below
        members = set(self.group.consumers)
        for _ in range(2):
            for name in sorted(members):
                self.beat(name, self.clients[name].answer)
        assert set(self.group.consumers) == members
        if members:
            loads = counts(self.group).values()
            assert max(loads) - min(loads) <= 1
        for s, e in self.group.shards.items():
            if e.state is ALLOC and e.delivered:
                assert e.owner is not None
                assert s in self.clients[e.owner].answer

    # --- invariants after every step ------------------------------------------------------

    @invariant()
    def one_owner_per_shard(self) -> None:
        g = self.group
        for e in g.shards.values():
            if e.state in (ALLOC, TRANSFER):
                assert e.owner in g.consumers
            else:
                assert e.owner is None
            if e.state is TRANSFER:
                assert e.next in g.consumers
                assert e.next != e.owner
            else:
                assert e.next is None
        # what the live clients consume right now never overlaps (bar a forced rewind)
        for s in g.shards:
            consumers = {n for n, cl in self.clients.items() if n in g.consumers and s in cl.answer}
            assert len(consumers - self.excused.get(s, set())) <= 1, (s, consumers)

    @invariant()
    def waiting_only_for_a_reason(self) -> None:
        g = self.group
        for s, e in g.shards.items():
            if e.state is WAIT:
                assert g.order
                assert any(g.shards[p].state is not OVER for p in ancestors(g, s))


TestCoordinator = CoordinatorMachine.TestCase
TestCoordinator.settings = settings(deadline=None)
