"""Consumer-group coordinator: the pure per-shard state machine behind the consumer-group APIs.

Invariants (h11 style; every function below keeps them and the tests check them after
every step):

Rule 1: every change of a shard's state is one edge of ``TRANSITIONS`` and goes through
        ``_Work.move``, which raises ``IllegalTransition`` for an edge the table does not allow.
Rule 2: ``step`` never mutates its input. It works on copies and returns a new ``Group``, so an
        exception (``IllegalTransition`` or a ``Refused``) leaves the caller's group as it was.
Rule 3: ALLOC has an ``owner``; TRANSFER has an ``owner`` and a different ``next``; WAIT,
        NOT_ALLOC and OVER have neither. Every owner and next is a live consumer.
Rule 4: a heartbeat is answered with exactly the ALLOC shards its consumer owns. WAIT and OVER
        shards are never handed out; a TRANSFER shard is left out of its owner's answer, which
        is how the owner learns to commit its checkpoint and let go.
Rule 5: a shard changes hands only after its owner let it go (a heartbeat that no longer lists
        it), left or expired. Balancing never gives an ALLOC shard straight to another
        consumer: it promises it (TRANSFER) and waits for the owner.
Rule 6: after a heartbeat, the loads (ALLOC shards owned + TRANSFER shards promised) of any
        two live consumers differ by at most 1, and no NOT_ALLOC shard is left while some
        consumer is live. (With allow-lists, Rule 8, as far as they let it.)
Rule 7: no I/O, no clock, no logging. Time arrives in every event as ``now`` (seconds).
Rule 8: (loghubd extension) a consumer that heartbeats with an allow-list (``allowed``) is
        never given, nor promised, a shard outside it. Its quota is capped by how many
        shards it may take, and the others share the rest; a shard it holds outside the
        list (the list changed) is left out of its answers and handed on like an excess
        shard (or freed once let go). A shard no live consumer may take stays NOT_ALLOC.
        Best effort when allow-lists overlap (greedy, not a matching).

Edge numbers are those of DESIGN.md and the reference document. Sub-cases that share a number:
5 also re-targets a TRANSFER to another ``next`` (TRANSFER -> TRANSFER); 6 covers "the owner
let go" (``owner := next``), "next timed out or left" and "balancing cancels the promise"
(both: the owner keeps it); 9 covers "the owner timed out or left" and "the owner let go".
8 (a read-only shard's checkpoint is at its end) starts from any state but OVER: from ALLOC
when its owner commits the end, and from NOT_ALLOC, TRANSFER or WAIT when the end was
committed by force, or before a split or merge made the shard read-only (``ShardsDrained``).
The official consumers commit a checkpoint only when it changes, so a shard left ALLOC with
its end already committed would be held, and in an ordered group hold its children back, for
good.
Deleting a shard (``ShardsRemoved``: a read-only shard's data expired) is not an edge: the
machine of that shard simply ends.

Why one module of ~620 lines: the rules above are one invariant set over one data type.
Splitting the balancing from the transitions would put Rule 5 and Rule 6 on two sides of a
module boundary that both must see; the file is the unit that the stateful tests check.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, assert_never


class ShardState(enum.Enum):
    """The state of one shard in one consumer group (values as the reference spells them)."""

    WAIT = "wait"
    NOT_ALLOC = "not_alloc"
    ALLOC = "already_alloc"
    TRANSFER = "transfer"
    OVER = "over"


WAIT, NOT_ALLOC, ALLOC, TRANSFER, OVER = ShardState

# THE table: (edge number, to-state) -> the from-states it may start from (None = new shard).
TRANSITIONS: Mapping[tuple[int, ShardState], frozenset[ShardState | None]] = MappingProxyType(
    {
        (1, WAIT): frozenset({None}),
        (1, NOT_ALLOC): frozenset({None}),
        (2, NOT_ALLOC): frozenset({WAIT}),
        (3, ALLOC): frozenset({NOT_ALLOC}),
        (4, NOT_ALLOC): frozenset({TRANSFER}),
        (5, TRANSFER): frozenset({ALLOC, TRANSFER}),  # TRANSFER -> TRANSFER: re-target next
        (6, ALLOC): frozenset({TRANSFER}),
        (7, NOT_ALLOC): frozenset({OVER}),
        (8, OVER): frozenset({ALLOC, NOT_ALLOC, TRANSFER, WAIT}),
        (9, NOT_ALLOC): frozenset({ALLOC}),
    }
)


@dataclass(frozen=True, slots=True)
class ShardEntry:
    """One shard's state in a group; the constructor enforces Rule 3's field shapes."""

    state: ShardState
    parents: tuple[int, ...] = ()  # lineage, for ordered groups (split: 1 parent, merge: 2)
    owner: str | None = None  # ALLOC and TRANSFER
    next: str | None = None  # TRANSFER only: the consumer it is promised to
    delivered: bool = False  # the owner has been answered this shard in a heartbeat

    def __post_init__(self) -> None:
        held = self.state in (ALLOC, TRANSFER)
        if held != (self.owner is not None) or (self.state is TRANSFER) != (self.next is not None):
            raise ValueError(f"owner/next do not fit state {self.state.name}: {self!r}")
        if self.next is not None and self.next == self.owner:
            raise ValueError(f"a shard cannot be promised to its own owner: {self!r}")
        if self.delivered and not held:
            raise ValueError(f"only a held shard can be delivered: {self!r}")


@dataclass(frozen=True, slots=True)
class Group:
    """A consumer group: settings, live consumers and one ShardEntry per shard. Immutable."""

    name: str
    timeout: float  # seconds without heartbeat before a consumer is expired
    order: bool
    consumers: Mapping[str, float]  # live consumer name -> time of last heartbeat
    shards: Mapping[int, ShardEntry]
    # loghubd extension: live consumers that may only take these shards (Rule 8).
    allowed: Mapping[str, frozenset[int]] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        # Rule 3: only live consumers hold shards. Runs on every step, so it is written as
        # plain membership tests (building sets per shard cost 75% of a heartbeat).
        live = self.consumers
        for shard, e in self.shards.items():
            if (e.owner is not None and e.owner not in live) or (
                e.next is not None and e.next not in live
            ):
                raise ValueError(f"shard {shard} is held by a consumer that is not live: {e!r}")
        for consumer in self.allowed:  # only live consumers have allow-lists
            if consumer not in live:
                raise ValueError(f"allow-list of a consumer that is not live: {consumer!r}")


def new_group(name: str, timeout: float, order: bool) -> Group:
    """An empty group: no consumers, no shards (add them with ``ShardsAdded``)."""
    return Group(name, timeout, order, MappingProxyType({}), MappingProxyType({}))


# --- events (past tense, as the HTTP layer and the expiry ticker report them) ---------------


@dataclass(frozen=True, slots=True)
class ShardsAdded:
    """Shards appeared (logstore created, split, merge): ``(shard id, parent ids)`` pairs."""

    shards: tuple[tuple[int, tuple[int, ...]], ...]
    now: float


@dataclass(frozen=True, slots=True)
class ShardsRemoved:
    """Shards disappeared (a read-only shard's data expired). Unknown ids are ignored."""

    shard_ids: tuple[int, ...]
    now: float


@dataclass(frozen=True, slots=True)
class ShardsDrained:
    """Read-only shards whose committed checkpoint is already their end: a split or merge
    made them read-only after the group had read them to the end (or they never held data).
    Unknown ids, and shards already OVER, are ignored."""

    shard_ids: tuple[int, ...]
    now: float


@dataclass(frozen=True, slots=True)
class HeartbeatReceived:
    """A consumer reported the shards it holds, including those it is still shutting down."""

    consumer: str
    held: frozenset[int]
    now: float
    # loghubd extension: the only shards this consumer may be given; None: any (Rule 8).
    allowed: frozenset[int] | None = None


@dataclass(frozen=True, slots=True)
class ConsumerLeft:
    """A consumer left the group explicitly (our extension; SLS only has timeouts)."""

    consumer: str
    now: float


@dataclass(frozen=True, slots=True)
class CheckpointCommitted:
    """A checkpoint update; ``at_end``: the shard is read-only and this is its end cursor."""

    shard: int
    consumer: str
    force: bool
    at_end: bool
    now: float


@dataclass(frozen=True, slots=True)
class GroupUpdated:
    """The group's settings changed; ``None`` keeps a setting as it is."""

    order: bool | None
    timeout: float | None
    now: float


@dataclass(frozen=True, slots=True)
class Ticked:
    """Time passed (the server's expiry ticker): expire silent consumers."""

    now: float


Event = (
    ShardsAdded | ShardsRemoved | ShardsDrained | HeartbeatReceived | ConsumerLeft
    | CheckpointCommitted | GroupUpdated | Ticked
)  # fmt: skip


# --- results and errors ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Transition:
    """One table edge applied to one shard (``from_state`` is None for a new shard)."""

    shard: int
    number: int
    from_state: ShardState | None
    to_state: ShardState


@dataclass(frozen=True, slots=True)
class Outcome:
    """What ``step`` returns.

    ``answer`` is the heartbeat answer (sorted shard ids; empty for other events).
    ``changed`` is True when anything but consumers' last-heartbeat times changed, i.e. when
    the server must persist the group.
    """

    group: Group
    answer: tuple[int, ...] = ()
    transitions: tuple[Transition, ...] = ()
    changed: bool = False


class IllegalTransition(Exception):
    """An edge the table does not allow; nothing was changed. A bug, not a client error."""

    def __init__(self, shard: int, number: int, from_state: ShardState | None, to: ShardState):
        super().__init__(
            f"shard {shard}: edge {number} "
            f"{from_state.name if from_state else '(new)'} -> {to.name} is not allowed"
        )
        self.shard, self.number, self.from_state, self.to_state = shard, number, from_state, to


class Refused(Exception):
    """A request the coordinator turns down; nothing was changed. The server answers an error."""


class UnknownConsumerWithShards(Refused):
    """A heartbeat listing shards from a consumer that is not live (never seen, or expired)."""


class UnknownShard(Refused):
    """A checkpoint for a shard the group does not have."""


class UnknownConsumer(Refused):
    """A fenced (non-forced) checkpoint from a consumer that is not live."""


class NotOwner(Refused):
    """A fenced (non-forced) checkpoint from a live consumer that does not hold the shard."""


# --- the working copy -----------------------------------------------------------------------


@dataclass(slots=True)
class _Work:
    """Mutable copy of a group for the duration of one step (Rule 2)."""

    timeout: float
    order: bool
    consumers: dict[str, float]
    shards: dict[int, ShardEntry]
    allowed: dict[str, frozenset[int]] = field(default_factory=dict)
    transitions: list[Transition] = field(default_factory=list)

    def may_take(self, consumer: str, shard: int) -> bool:
        """Rule 8: whether ``consumer``'s allow-list (if any) lets it hold ``shard``."""
        allowed = self.allowed.get(consumer)
        return allowed is None or shard in allowed

    def move(self, shard: int, number: int, to: ShardEntry) -> None:
        """Apply edge ``number`` to ``shard``: the only place a shard's state changes (Rule 1)."""
        current = self.shards.get(shard)
        from_state = current.state if current is not None else None
        if from_state not in TRANSITIONS.get((number, to.state), frozenset()):
            raise IllegalTransition(shard, number, from_state, to.state)
        self.shards[shard] = to
        self.transitions.append(Transition(shard, number, from_state, to.state))

    def ancestors_over(self, parents: Iterable[int]) -> bool:
        """Every ancestor reachable from ``parents`` is OVER; one no longer here counts as OVER."""
        seen: set[int] = set()
        todo = list(parents)
        while todo:
            parent = todo.pop()
            entry = self.shards.get(parent)
            if parent in seen or entry is None:
                continue
            seen.add(parent)
            if entry.state is not OVER:
                return False
            todo.extend(entry.parents)
        return True

    def drained(self, shard: int) -> None:
        """Edge 8: read-only `shard` was read to its end. Its owner, if any, is no longer
        answered it (Rule 4) and lets go; in an ordered group its children may now start."""
        self.move(shard, 8, ShardEntry(OVER, self.shards[shard].parents))
        self.release_waiting()

    def release_waiting(self) -> None:
        """Edge 2 for every WAIT shard whose ancestors are all OVER (or the group is unordered)."""
        for shard, entry in sorted(self.shards.items()):
            if entry.state is WAIT and (not self.order or self.ancestors_over(entry.parents)):
                self.move(shard, 2, replace(entry, state=NOT_ALLOC))

    def drop_consumer(self, consumer: str, *, left: bool = False) -> None:
        """Take back what an expired (or departed: ``left``) consumer held and forget it.

        A consumer that left shut its shards down cleanly, so what it had promised goes
        straight to ``next`` (6); one that timed out may have stopped anywhere (4).
        """
        for shard, e in sorted(self.shards.items()):
            if e.state is ALLOC and e.owner == consumer:
                self.move(shard, 9, ShardEntry(NOT_ALLOC, e.parents))
            elif e.state is TRANSFER and e.owner == consumer and left:
                self.move(shard, 6, ShardEntry(ALLOC, e.parents, owner=e.next))
            elif e.state is TRANSFER and e.owner == consumer:
                self.move(shard, 4, ShardEntry(NOT_ALLOC, e.parents))
            elif e.state is TRANSFER and e.next == consumer:  # the owner keeps it
                self.move(shard, 6, replace(e, state=ALLOC, next=None))
        del self.consumers[consumer]
        self.allowed.pop(consumer, None)

    def expire(self, now: float) -> None:
        for consumer, last in sorted(self.consumers.items()):
            if now - last > self.timeout:
                self.drop_consumer(consumer)

    def load(self) -> dict[str, int]:
        loads = dict.fromkeys(sorted(self.consumers), 0)
        for e in self.shards.values():
            if e.state is ALLOC and e.owner is not None:
                loads[e.owner] += 1
            elif e.state is TRANSFER and e.next is not None:
                loads[e.next] += 1
        return loads

    def quotas(self, loads: dict[str, int], free: list[int]) -> dict[str, int]:
        """Rule 6's quotas: with m balanced shards and n consumers, the m % n ceil quotas go
        to the most loaded consumers (ties by name). Rule 8: a consumer that may take fewer
        shards than its share gets that many, and the others share the rest the same way."""
        pending = sorted(loads, key=lambda c: (-loads[c], c))
        remaining = sum(loads.values()) + len(free)  # the balanced shards
        if not self.allowed:  # the common case, on every heartbeat: keep it cheap
            q, r = divmod(remaining, len(pending))
            return {c: q + (i < r) for i, c in enumerate(pending)}
        quota: dict[str, int] = {}
        every = frozenset(
            s for s, e in self.shards.items() if e.state in (NOT_ALLOC, ALLOC, TRANSFER)
        )
        capacity = {
            c: len(self.allowed[c] & every) if c in self.allowed else len(every) for c in pending
        }
        while pending:
            q, r = divmod(remaining, len(pending))
            share = {c: q + (i < r) for i, c in enumerate(pending)}
            capped = [c for c in pending if capacity[c] < share[c]]
            if not capped:
                quota.update(share)
                break
            for c in capped:
                quota[c] = capacity[c]
                remaining -= capacity[c]
                pending.remove(c)
        return quota

    def balance(self, first: str) -> None:
        """Sticky balancing (Rule 6): only the excess of over-quota consumers moves.

        Over-quota consumers give up incoming promises first, then their own ALLOC shards,
        highest ids first (Rule 8: shards they may not hold come before everything, and
        shards an under-quota consumer may take before the others). Given-up promises
        return to an under-quota owner (6, cancel); the rest, and the NOT_ALLOC shards, go
        to under-quota consumers allowed to take them, ``first`` (the heartbeating consumer,
        who can start at once) before the others.
        """
        for s, e in sorted(self.shards.items()) if self.allowed else ():
            # Rule 8: a shard its owner may no longer hold and was never told about can be
            # handed out again at once (the owner cannot be consuming it).
            misplaced = e.owner is not None and not self.may_take(e.owner, s)
            if e.state is ALLOC and misplaced and not e.delivered:
                self.move(s, 9, ShardEntry(NOT_ALLOC, e.parents))
            elif e.state is TRANSFER and misplaced and not e.delivered:
                # Promised on while undelivered: nothing to wait for, the next owner takes it.
                self.move(s, 6, ShardEntry(ALLOC, e.parents, owner=e.next))
        loads = self.load()
        if not loads:
            return
        free = [s for s, e in sorted(self.shards.items()) if e.state is NOT_ALLOC]
        quota = self.quotas(loads, free)
        deficit = {c: quota[c] - loads[c] for c in loads if quota[c] > loads[c]}

        def wanted(s: int) -> bool:
            return any(self.may_take(c, s) for c in deficit)

        given_up: list[int] = []
        for c, load in loads.items():
            if load <= quota[c] and c not in self.allowed:
                continue  # nothing to give up (only allow-lists make shards misplaced)
            ids = sorted(self.shards, reverse=True)
            incoming = [s for s in ids if self.shards[s].next == c]
            owned = [s for s in ids if self.shards[s].state is ALLOC and self.shards[s].owner == c]
            misplaced_here = [s for s in incoming + owned if not self.may_take(c, s)]
            rest = [s for s in incoming if s not in misplaced_here]
            kept = [s for s in owned if s not in misplaced_here]
            rest += sorted(kept, key=lambda s: not wanted(s)) if self.allowed else kept
            given_up += misplaced_here + rest[: max(0, load - quota[c] - len(misplaced_here))]
        # Under-quota consumers in the order they are served; dropped once at quota.
        order = list(dict.fromkeys(c for c in [first, *sorted(deficit)] if c in deficit))

        def took(c: str) -> None:
            deficit[c] -= 1
            if deficit[c] == 0:
                order.remove(c)

        rest_shards: list[int] = []
        for s in sorted(given_up):
            e = self.shards[s]
            owner = e.owner
            if (
                e.state is TRANSFER
                and owner is not None
                and deficit.get(owner, 0) > 0
                and self.may_take(owner, s)
            ):
                self.move(s, 6, replace(e, state=ALLOC, next=None))
                took(owner)
            else:
                rest_shards.append(s)
        for s in free + sorted(rest_shards):
            e = self.shards[s]
            taker = next((c for c in order if self.may_take(c, s)), None)
            if taker is not None:
                took(taker)
            elif (
                e.state is not NOT_ALLOC
                and e.owner is not None
                and not (self.may_take(e.owner, s) and (e.next is None or self.may_take(e.next, s)))
            ):
                # Misplaced (Rule 8) and nobody short may take it: the least loaded
                # consumer allowed to, over its quota if need be.
                now_loads = self.load()
                able = [c for c in loads if c != e.owner and self.may_take(c, s)]
                taker = min(able, key=lambda c: (now_loads[c], c), default=None)
            if taker is None:
                if e.state is TRANSFER and e.next is not None and not self.may_take(e.next, s):
                    self.move(s, 6, replace(e, state=ALLOC, next=None))  # cancel the promise
                continue
            if e.state is NOT_ALLOC:
                self.move(s, 3, ShardEntry(ALLOC, e.parents, owner=taker))
            elif taker != e.next:  # ALLOC or TRANSFER; a taker is never its owner
                self.move(s, 5, replace(e, state=TRANSFER, next=taker))

    def answer(self, consumer: str) -> tuple[int, ...]:
        """The heartbeat answer (Rule 4); the shards in it are now delivered. A shard outside
        the consumer's allow-list is left out (Rule 8), so it lets go of it."""
        mine = [
            s
            for s, e in sorted(self.shards.items())
            if e.state is ALLOC and e.owner == consumer and self.may_take(consumer, s)
        ]
        for s in mine:
            self.shards[s] = replace(self.shards[s], delivered=True)
        return tuple(mine)


# --- the entry point ------------------------------------------------------------------------


def step(group: Group, event: Event) -> Outcome:
    """Apply one event to a group and return the new group; ``group`` itself is never changed."""
    w = _Work(
        group.timeout,
        group.order,
        dict(group.consumers),
        dict(group.shards),
        dict(group.allowed),
    )
    answer: tuple[int, ...] = ()
    match event:
        case ShardsAdded(shards=added):
            for shard, parents in added:
                ready = not w.order or w.ancestors_over(parents)
                w.move(shard, 1, ShardEntry(NOT_ALLOC if ready else WAIT, tuple(parents)))
        case ShardsRemoved(shard_ids=ids):
            for shard in ids:
                w.shards.pop(shard, None)
            w.release_waiting()
        case ShardsDrained(shard_ids=ids):
            for shard in ids:
                entry = w.shards.get(shard)
                if entry is not None and entry.state is not OVER:
                    w.drained(shard)
        case HeartbeatReceived(consumer=c, held=held, now=now):
            if c not in w.consumers and held:
                raise UnknownConsumerWithShards(f"consumer {c!r} is not in group {group.name!r}")
            w.consumers[c] = now
            if event.allowed is None:
                w.allowed.pop(c, None)
            else:
                w.allowed[c] = event.allowed
            w.expire(now)
            _let_go(w, c, held)
            w.release_waiting()
            w.balance(first=c)
            answer = w.answer(c)
        case ConsumerLeft(consumer=c):
            if c in w.consumers:
                w.drop_consumer(c, left=True)
        case CheckpointCommitted():
            _checkpoint(w, event)
        case GroupUpdated(order=order, timeout=timeout):
            w.timeout = group.timeout if timeout is None else timeout
            w.order = group.order if order is None else order
            if group.order and not w.order:
                w.release_waiting()
        case Ticked(now=now):
            w.expire(now)
            w.release_waiting()
        case _:
            assert_never(event)
    new = Group(
        group.name,
        w.timeout,
        w.order,
        MappingProxyType(w.consumers),
        MappingProxyType(w.shards),
        MappingProxyType(w.allowed),
    )
    changed = (
        (new.timeout, new.order) != (group.timeout, group.order)
        or new.consumers.keys() != group.consumers.keys()
        or new.shards != group.shards
        or dict(new.allowed) != dict(group.allowed)
    )
    return Outcome(new, answer, tuple(w.transitions), changed)


def _let_go(w: _Work, consumer: str, held: frozenset[int]) -> None:
    """Shards ``consumer`` owns but no longer lists have been let go (9 and 6)."""
    for shard, e in sorted(w.shards.items()):
        if e.owner != consumer or shard in held:
            continue
        if e.state is ALLOC and e.delivered:
            w.move(shard, 9, ShardEntry(NOT_ALLOC, e.parents))
        elif e.state is TRANSFER and e.next is not None:
            w.move(shard, 6, ShardEntry(ALLOC, e.parents, owner=e.next))
        # An undelivered ALLOC shard is not let go: its owner cannot list it yet.


def _checkpoint(w: _Work, event: CheckpointCommitted) -> None:
    entry = w.shards.get(event.shard)
    if entry is None:
        raise UnknownShard(f"shard {event.shard} is not in the group")
    if not event.force:
        if event.consumer not in w.consumers:
            raise UnknownConsumer(f"consumer {event.consumer!r} is not in the group")
        # TRANSFER's old owner may still save its progress before letting go.
        if entry.state not in (ALLOC, TRANSFER) or entry.owner != event.consumer:
            raise NotOwner(f"consumer {event.consumer!r} does not hold shard {event.shard}")
    if event.at_end and entry.state is not OVER:
        w.drained(event.shard)
    elif not event.at_end and entry.state is OVER and event.force:
        w.move(event.shard, 7, ShardEntry(NOT_ALLOC, entry.parents))


# --- helpers for the server -----------------------------------------------------------------


def counts(group: Group) -> dict[str, int]:
    """Per live consumer: ALLOC shards it owns + TRANSFER shards promised to it."""
    return _Work(
        group.timeout,
        group.order,
        dict(group.consumers),
        dict(group.shards),
        dict(group.allowed),
    ).load()


def to_dict(group: Group) -> dict[str, Any]:
    """A JSON-safe snapshot. Heartbeat times are left out: they are not worth a write."""
    return {
        "name": group.name,
        "timeout": group.timeout,
        "order": group.order,
        "consumers": sorted(group.consumers),
        "shards": [
            {
                "shard": shard,
                "state": e.state.value,
                "parents": list(e.parents),
                "owner": e.owner,
                "next": e.next,
                "delivered": e.delivered,
            }
            for shard, e in sorted(group.shards.items())
        ],
        "allowed": {c: sorted(shards) for c, shards in sorted(group.allowed.items())},
    }


def from_dict(d: Mapping[str, Any], now: float) -> Group:
    """Inverse of ``to_dict``. Every consumer gets a fresh lease from ``now``, so a restarted
    server keeps the consumers it knew instead of expiring them at once."""
    shards = {
        int(s["shard"]): ShardEntry(
            ShardState(s["state"]),
            tuple(int(p) for p in s["parents"]),
            s["owner"],
            s["next"],
            bool(s["delivered"]),
        )
        for s in d["shards"]
    }
    consumers = dict.fromkeys(d["consumers"], now)
    allowed = {
        str(c): frozenset(int(s) for s in shards)
        for c, shards in d.get("allowed", {}).items()  # absent in data of older versions
        if c in consumers
    }
    return Group(
        str(d["name"]),
        float(d["timeout"]),
        bool(d["order"]),
        MappingProxyType(consumers),
        MappingProxyType(shards),
        MappingProxyType(allowed),
    )
