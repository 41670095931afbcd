"""The heartbeat loop with a scripted client: joining, assignment changes, the server
forgetting us, a lease that expires and is renewed, the shard allow-list refused, shards
answered outside the filter, and the stop that waits for the heartbeat in flight."""

from __future__ import annotations

import time

import anyio
import pytest
import structlog

from loghubd.consumer import heartbeat
from loghubd.consumer.assignment import Assignment, Diff
from loghubd.consumer.heartbeat import HeartbeatSettings, HeartbeatState, run_heartbeat
from loghubd.consumer.supervisor import Waker
from loghubd.consumer.terms import GroupTerms
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
    group_timeouts: tuple[float, ...] = (),
    terms: GroupTerms | None = None,
) -> tuple[ScriptedClient, FakeSupervisor, HeartbeatState, Assignment, Metrics]:
    """Run the loop until the script is answered, then stop it. `closing_after_first`: the
    supervisor starts shutting down once it has applied the first answer."""
    stop = anyio.Event()
    client = ScriptedClient(heartbeats=script, on_exhausted=stop.set, group_timeouts=group_timeouts)
    assignment = Assignment(None if shards is None else frozenset(shards))
    supervisor, state, metrics = FakeSupervisor(assignment), HeartbeatState(), Metrics()
    supervisor.close_after_apply = closing_after_first
    settings = HeartbeatSettings(
        logstore="ls",
        group="g",
        consumer="c",
        terms=terms or GroupTerms(configured_interval=interval, timeout=timeout),
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


def test_the_first_answer_after_failed_heartbeats_says_so_once_per_run_of_failures() -> None:
    down = E.SlsError("down")
    with structlog.testing.capture_logs() as logs:
        beat([[0], down, down, down, [0], [0], down, [0], [0]])
    said = [e for e in logs if e["event"] == "heartbeat_recovered"]
    assert [(e["failures"], e["group"], e["consumer"]) for e in said] == [
        (3, "g", "c"),
        (1, "g", "c"),
    ]
    assert all(e["failing_for_s"] >= 0 for e in said)
    events = [e["event"] for e in logs if e["event"].startswith("heartbeat_")]
    assert events == ["heartbeat_failed"] * 3 + ["heartbeat_recovered"] + [
        "heartbeat_failed",
        "heartbeat_recovered",
    ]


def test_answered_heartbeats_say_nothing_of_recovering() -> None:
    with structlog.testing.capture_logs() as logs:
        beat([[], [0, 1], [0, 1], [1, 2]])
    assert not [e for e in logs if e["event"] == "heartbeat_recovered"]


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


def test_a_rejoin_reads_the_group_timeout_and_heartbeats_follow_it() -> None:
    # An SDK worker rewrote the group's timeout to 1.5 s (2 x its heartbeat_interval): the
    # daemon, beating every 0.8 s, was expired. The rejoin reads the timeout again, and
    # from then on the daemon beats every 0.5 s and measures its lease by 1.5 s.
    terms = GroupTerms(configured_interval=0.8, timeout=15.0)
    with structlog.testing.capture_logs() as logs:
        client, sup, _state, _assignment, _metrics = beat(
            [[0, 1], E.NotExistConsumerWithBody("expired"), [0, 1]],
            group_timeouts=(1.5,),
            terms=terms,
        )
    assert terms.timeout == 1.5 and terms.interval == 0.5
    changed = [e for e in logs if e["event"] == "consumer_group_timeout_changed"]
    assert len(changed) == 1
    assert changed[0]["timeout_was"] == 15.0 and changed[0]["heartbeat_interval"] == 0.5
    names = [name for name, _ in client.calls]
    assert names[:4] == ["heartbeat", "heartbeat", "list_groups", "heartbeat"]
    assert sup.dropped == [frozenset({0, 1})]


def test_the_group_timeout_is_read_again_every_so_often(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heartbeat, "TERMS_EVERY_S", 0.0)  # after every answered heartbeat
    terms = GroupTerms(configured_interval=0.01, timeout=15.0)
    with structlog.testing.capture_logs() as logs:
        client, *_ = beat([[0], [0], [0]], group_timeouts=(15.0, 15.0, 4.0), terms=terms)
    changed = [e for e in logs if e["event"] == "consumer_group_timeout_changed"]
    assert [(e["timeout_was"], e["timeout"]) for e in changed] == [(15.0, 4.0)]
    assert [name for name, _ in client.calls].count("list_groups") >= 3
    assert terms.timeout == 4.0 and terms.interval == 0.01  # configured shorter: kept
