"""The heartbeat loop: report held shards, turn the answer into shard starts and stops.

Heartbeats have their own deadline below the group timeout and never wait on processors.
`NotExistConsumerWithBody` (the server expired us) drops every shard and rejoins with [] at
once: only the server can say that our shards are gone.

The interval and the lease follow the group's timeout as the service holds it (`terms`): it is
read again every TERMS_EVERY_S and after every rejoin, since another consumer (an SDK worker
starting) may rewrite it; a change is logged (`consumer_group_timeout_changed`).

The lease is counted from when the last answered heartbeat was *sent* (the server's count
starts no earlier), so an answer that was in flight while the process was paused never
renews it. When heartbeats fail for longer than the group timeout (a service outage, a
partition, a pause) the lease is *expired*, not lost: shard tasks hold the batch in hand
unprocessed (another consumer may own the shard by now) but keep their shards, and the next
answered heartbeat decides. A server that still knows us (an outage shorter than its own
memory of the group: `loghubd serve` renews leases when it restarts) hands the shards back
and consumption continues without a single duplicate; one that expired us answers
`NotExistConsumerWithBody`, and the shards are dropped then. Commits stay allowed throughout:
they are fenced by the server.

Shard filter (`consumer.shards`): the assignment never starts nor reports a shard outside it,
and every heartbeat sends the filter as loghubd's `shards` allow-list extension, so a service
that honours it never hands us other shards. A service without it may still answer such
shards: they stay unconsumed while the balancer counts them as ours, so this is logged
(`shards_outside_filter_assigned`), shown in /status and counted in the
`loghubd_shards_outside_filter` gauge. A service that refuses the parameter
(ParameterInvalid) gets heartbeats without it from then on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import anyio
import structlog

from loghubd.consumer.assignment import Assignment
from loghubd.consumer.supervisor import Supervisor, Waker
from loghubd.consumer.terms import GroupTerms, group_timeout
from loghubd.faults import Episode
from loghubd.ops.metrics import Metrics
from loghubd.protocol import errors as E
from loghubd.sls import SlsClient

log = structlog.get_logger("loghubd.heartbeat")

MIN_GAP_S = 0.05  # two heartbeats are never closer than this, however often we are woken
TERMS_EVERY_S = 30.0  # how often the group's timeout is read again (and after a rejoin)


@dataclass
class HeartbeatState:
    joined: bool = False
    last_ok: float = 0.0  # monotonic: when the last answered heartbeat was sent
    expired: bool = False  # heartbeats failed past the timeout; the next answer decides
    last_error: str = ""
    # Shards the last answer gave us outside `consumer.shards` (never started nor reported).
    unwanted: frozenset[int] = frozenset()

    def lease_valid(self, timeout: float) -> bool:
        """Whether the server can still consider us alive (our last heartbeat is fresh)."""
        return self.joined and time.monotonic() - self.last_ok < timeout


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatSettings:
    logstore: str
    group: str
    consumer: str
    terms: GroupTerms  # the interval and the group's timeout, kept up to date by the loop
    allowed: tuple[int, ...] | None = None  # consumer.shards, sent as the `shards` extension


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
    terms = settings.terms
    scheduled = terms_read = time.monotonic()
    worst_delay = 0.0
    failing = Episode()  # `heartbeat_recovered` at the first answer after failed heartbeats
    allowed = settings.allowed
    while stop is None or not stop.is_set():
        started = time.monotonic()
        delay = max(0.0, started - scheduled)
        metrics.heartbeat_delay.set(delay)
        if delay > worst_delay:
            worst_delay = delay
            metrics.heartbeat_delay_max.set(delay)
        held = assignment.report()
        deadline = max(1.0, min(terms.interval, terms.timeout / 3))
        try:
            answer = await client.heartbeat(
                settings.logstore,
                settings.group,
                settings.consumer,
                held,
                timeout=deadline,
                allowed=allowed,
            )
        except E.NotExistConsumerWithBody:
            log.warning("heartbeat_rejoin", **bind, held=held, timeout=terms.timeout)
            supervisor.drop(assignment.reset().to_stop)
            state.joined = state.expired = False
            await _read_terms(client, settings, deadline, bind)  # did the timeout shrink?
            scheduled = terms_read = time.monotonic()
            continue  # rejoin with [] now
        except E.SlsError as exc:
            if isinstance(exc, E.ParameterInvalid) and allowed is not None:
                log.warning("shard_allow_list_refused", **bind, error=str(exc)[:300])
                allowed = None  # the filter still applies here; the service just is not told
                continue
            metrics.heartbeat_failures.inc()
            state.last_error = str(exc)
            log.warning("heartbeat_failed", **bind, error=str(exc)[:300])
            failing.failed(time.monotonic())
            if state.joined and not state.expired and not state.lease_valid(terms.timeout):
                # Not dropped: the server may still hold them for us (see the docstring).
                log.error("lease_expired", **bind, shards=held)
                state.expired = True
        else:
            metrics.heartbeat_seconds.observe(time.monotonic() - started)
            if ended := failing.recovered(time.monotonic()):
                log.info("heartbeat_recovered", **bind, **ended)
            if state.expired:
                log.warning("lease_renewed", **bind, shards=sorted(answer))
            state.joined, state.last_ok, state.last_error = True, started, ""
            state.expired = False
            if supervisor.closing:
                # Shutting down: keep the lease while shards drain, take nothing new. Shards
                # answered now are let go by our next report (or by the leave).
                answer = [s for s in answer if s in assignment.held]
            _note_unwanted(answer, assignment, state, bind)
            metrics.shards_outside_filter.set(len(state.unwanted))
            diff = assignment.apply_answer(answer)
            if diff.to_start or diff.to_stop:
                log.info(
                    "assignment_changed",
                    **bind,
                    start=sorted(diff.to_start),
                    stop=sorted(diff.to_stop),
                )
            supervisor.apply(diff)
            if time.monotonic() - terms_read >= TERMS_EVERY_S:
                await _read_terms(client, settings, deadline, bind)
                terms_read = time.monotonic()
        scheduled = started + terms.interval
        await waker.sleep(max(MIN_GAP_S, scheduled - time.monotonic()))


async def _read_terms(
    client: SlsClient, settings: HeartbeatSettings, deadline: float, bind: dict[str, str]
) -> None:
    """Read the group's timeout again; a change is logged and heartbeats follow it. A call
    that fails changes nothing: the next one (TERMS_EVERY_S later) tries again."""
    terms = settings.terms
    try:
        with anyio.fail_after(deadline):
            groups = await client.list_groups(settings.logstore)
    except (E.SlsError, TimeoutError) as exc:
        log.debug("consumer_group_unread", **bind, error=str(exc)[:300])
        return
    was = terms.update(group_timeout(groups, settings.group))
    if was is not None:
        log.warning(
            "consumer_group_timeout_changed",
            **bind,
            timeout_was=was,
            timeout=terms.timeout,
            heartbeat_interval=terms.interval,
            configured_heartbeat_interval=terms.configured_interval,
            hint="another consumer rewrote the group's timeout (an SDK ConsumerWorker sets "
            "it to 2 x its heartbeat_interval when it starts); heartbeats follow it",
        )


def _note_unwanted(
    answer: list[int], assignment: Assignment, state: HeartbeatState, bind: dict[str, str]
) -> None:
    wanted = assignment.shard_filter
    unwanted = frozenset() if wanted is None else frozenset(answer) - wanted
    if unwanted and unwanted != state.unwanted:
        log.warning(
            "shards_outside_filter_assigned",
            **bind,
            shards=sorted(unwanted),
            filter=sorted(wanted or ()),
            why="the service does not honour the shard allow-list: these shards are not "
            "consumed while the group counts them as ours",
        )
    state.unwanted = unwanted
