"""The heartbeat loop: report held shards, turn the answer into shard starts and stops.

Heartbeats have their own deadline below the group timeout and never wait on processors.
`NotExistConsumerWithBody` (the server expired us) drops every shard and rejoins with [] at
once. When heartbeats keep failing for longer than the group timeout the server has surely
given our shards away, so they are dropped too (without committing: fenced commits would be
refused anyway).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import anyio
import structlog

from loghubd.consumer.assignment import Assignment
from loghubd.consumer.client import SlsClient
from loghubd.consumer.supervisor import Supervisor, Waker
from loghubd.ops.metrics import Metrics
from loghubd.protocol import errors as E

log = structlog.get_logger("loghubd.heartbeat")

MIN_GAP_S = 0.05  # two heartbeats are never closer than this, however often we are woken


@dataclass
class HeartbeatState:
    joined: bool = False
    last_ok: float = 0.0  # monotonic
    last_error: str = ""

    def lease_valid(self, timeout: float) -> bool:
        """Whether the server can still consider us alive (our last heartbeat is fresh)."""
        return self.joined and time.monotonic() - self.last_ok < timeout


@dataclass(frozen=True, slots=True)
class HeartbeatSettings:
    logstore: str
    group: str
    consumer: str
    interval: float
    timeout: float


async def run_heartbeat(
    client: SlsClient,
    settings: HeartbeatSettings,
    assignment: Assignment,
    supervisor: Supervisor,
    metrics: Metrics,
    state: HeartbeatState,
    waker: Waker,
    stop: anyio.Event | None = None,
) -> None:
    """Heartbeat until `stop` is set (then wake `waker`): returns after the heartbeat in
    flight, if any, has been answered, so no heartbeat of ours reaches the server after that
    (a late one would re-join us after `leave` and be handed shards we never serve)."""
    bind = {"group": settings.group, "consumer": settings.consumer}
    deadline = max(1.0, min(settings.interval, settings.timeout / 3))
    scheduled = time.monotonic()
    worst_delay = 0.0
    while stop is None or not stop.is_set():
        started = time.monotonic()
        delay = max(0.0, started - scheduled)
        metrics.heartbeat_delay.set(delay)
        if delay > worst_delay:
            worst_delay = delay
            metrics.heartbeat_delay_max.set(delay)
        held = assignment.report()
        try:
            answer = await client.heartbeat(
                settings.logstore, settings.group, settings.consumer, held, timeout=deadline
            )
        except E.NotExistConsumerWithBody:
            log.warning("heartbeat_rejoin", **bind, held=held)
            supervisor.drop(assignment.reset().to_stop)
            state.joined = False
            scheduled = time.monotonic()
            continue  # rejoin with [] now
        except E.SlsError as exc:
            metrics.heartbeat_failures.inc()
            state.last_error = str(exc)
            log.warning("heartbeat_failed", **bind, error=str(exc)[:300])
            if state.joined and time.monotonic() - state.last_ok > settings.timeout:
                log.error("lease_lost", **bind, shards=held)
                supervisor.drop(assignment.reset().to_stop)
                state.joined = False
        else:
            metrics.heartbeat_seconds.observe(time.monotonic() - started)
            state.joined, state.last_ok, state.last_error = True, time.monotonic(), ""
            if supervisor.closing:
                # Shutting down: keep the lease while shards drain, take nothing new. Shards
                # answered now are let go by our next report (or by the leave).
                answer = [s for s in answer if s in assignment.held]
            diff = assignment.apply_answer(answer)
            if diff.to_start or diff.to_stop:
                log.info(
                    "assignment_changed",
                    **bind,
                    start=sorted(diff.to_start),
                    stop=sorted(diff.to_stop),
                )
            supervisor.apply(diff)
        scheduled = started + settings.interval
        await waker.sleep(max(MIN_GAP_S, scheduled - time.monotonic()))
