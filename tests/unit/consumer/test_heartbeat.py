"""The heartbeat loop with a scripted client: joining, assignment changes, the server
forgetting us, a lease that expires and is renewed, the shard allow-list refused, shards
answered outside the filter, and the stop that waits for the heartbeat in flight."""

from __future__ import annotations

import time

import anyio
import structlog

from loghubd.consumer.assignment import Assignment, Diff
from loghubd.consumer.heartbeat import HeartbeatSettings, HeartbeatState, run_heartbeat
from loghubd.consumer.supervisor import Waker
from loghubd.ops.metrics import Metrics
from loghubd.protocol import errors as E
from tests.unit.consumer.scripted import Answer, ScriptedClient


class FakeSupervisor:
    """Records what the loop asks of the supervisor; shard tasks "exit" at once on a stop."""

    def __init__(self, assignment: Assignment) -> None:
        self.assignment = assignment
        self.closing = False
        self.applied: list[Diff] = []
        self.dropped: list[frozenset[int]] = []
        self.close_after_apply = False

    def apply(self, diff: Diff) -> None:
        self.applied.append(diff)
        for shard in diff.to_stop:
            self.assignment.stopped(shard)
        self.closing = self.closing or self.close_after_apply

    def drop(self, shards: frozenset[int]) -> None:
        self.dropped.append(shards)
        for shard in shards:
            self.assignment.stopped(shard)


def beat(
    script: list[Answer],
    *,
    shards: tuple[int, ...] | None = None,
    timeout: float = 5.0,
    interval: float = 0.01,
    closing_after_first: bool = False,
) -> tuple[ScriptedClient, FakeSupervisor, HeartbeatState, Assignment, Metrics]:
    """Run the loop until the script is answered, then stop it. `closing_after_first`: the
    supervisor starts shutting down once it has applied the first answer."""
    stop = anyio.Event()
    client = ScriptedClient(heartbeats=script, on_exhausted=stop.set)
    assignment = Assignment(None if shards is None else frozenset(shards))
    supervisor, state, metrics = FakeSupervisor(assignment), HeartbeatState(), Metrics()
    supervisor.close_after_apply = closing_after_first
    settings = HeartbeatSettings(
        logstore="ls",
        group="g",
        consumer="c",
        interval=interval,
        timeout=timeout,
        allowed=shards,
    )

    async def main() -> None:
        with anyio.fail_after(10):
            await run_heartbeat(
                client,  # type: ignore[arg-type]
                settings,
                assignment,
                supervisor,  # type: ignore[arg-type]
                metrics,
                state,
                Waker(),
                stop,
            )

    anyio.run(main)
    return client, supervisor, state, assignment, metrics


def starts(supervisor: FakeSupervisor) -> list[list[int]]:
    return [sorted(d.to_start) for d in supervisor.applied if d.to_start]


def stops(supervisor: FakeSupervisor) -> list[list[int]]:
    return [sorted(d.to_stop) for d in supervisor.applied if d.to_stop]


def test_join_then_rebalance() -> None:
    client, sup, state, assignment, _ = beat([[], [0, 1], [0, 1], [1, 2]])
    assert state.joined and state.last_error == ""
    assert starts(sup) == [[0, 1], [2]] and stops(sup) == [[0]]
    # Each heartbeat reports what was held after the previous answer.
    assert [held for held, _ in client.sent()[:4]] == [[], [], [0, 1], [0, 1]]
    assert assignment.report() == [1, 2]


def test_forgotten_consumer_drops_every_shard_and_rejoins_with_nothing() -> None:
    client, sup, _state, assignment, _ = beat([[0, 1], E.NotExistConsumerWithBody("expired"), [1]])
    assert sup.dropped == [frozenset({0, 1})]
    held = [h for h, _ in client.sent()]
    assert held[:3] == [[], [0, 1], []]  # the rejoin reports nothing
    assert starts(sup) == [[0, 1], [1]] and assignment.report() == [1]


def test_failures_past_the_timeout_expire_the_lease_and_an_answer_renews_it() -> None:
    # A failure within the timeout is only noted; once past it the lease is expired (the
    # shards are kept: the next answer decides) and an answer renews it.
    failures: list[Answer] = [E.SlsError("down") for _ in range(30)]
    with structlog.testing.capture_logs() as logs:
        _client, sup, state, assignment, metrics = beat(
            [[0], *failures, [0]], timeout=0.15, interval=0.01
        )
    events = [e["event"] for e in logs if e["event"].startswith("lease_")]
    assert events == ["lease_expired", "lease_renewed"]
    assert state.joined and not state.expired and state.last_error == ""
    assert sup.dropped == [] and assignment.report() == [0]
    assert metrics.heartbeat_failures._value.get() == 30


def test_a_lease_is_valid_only_while_heartbeats_are_fresh() -> None:
    state = HeartbeatState(joined=True, last_ok=time.monotonic())
    assert state.lease_valid(timeout=5.0)
    assert not HeartbeatState(joined=True, last_ok=time.monotonic() - 6).lease_valid(5.0)
    assert not HeartbeatState(joined=False, last_ok=time.monotonic()).lease_valid(5.0)


def test_a_refused_allow_list_is_not_sent_again() -> None:
    client, _sup, _state, assignment, _ = beat(
        [E.ParameterInvalid("shards: unknown parameter"), [0, 1, 2]], shards=(0, 1)
    )
    allowed = [a for _h, a in client.sent()]
    assert allowed[0] == (0, 1) and all(a is None for a in allowed[1:])
    assert assignment.report() == [0, 1]  # the filter still applies here


def test_shards_outside_the_filter_are_noted_never_started() -> None:
    _client, sup, state, assignment, metrics = beat([[0, 5, 6]], shards=(0,))
    assert starts(sup) == [[0]] and assignment.report() == [0]
    assert state.unwanted == frozenset({5, 6})
    assert metrics.shards_outside_filter._value.get() == 2


def test_while_closing_no_new_shard_is_taken() -> None:
    _client, sup, _state, assignment, _ = beat([[0], [0, 1]], closing_after_first=True)
    assert [sorted(d.to_start) for d in sup.applied] == [[0], [], []]
    assert assignment.report() == [0]
