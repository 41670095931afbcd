"""One source of `loghubd run`: one consumer of one logstore (`SourceRunner`).

Each runner has its own HTTP session, client, assignment, supervisor, heartbeat, flusher,
processor factory and metrics. Every log line its tasks write carries `source=<name>`
(structlog context variables, inherited by the tasks it starts), and `/metrics` labels every
series with it. A source whose service is down keeps retrying by itself (heartbeats and pulls
already do); a permanent start-up error (`StartupError`: bad credentials, a missing logstore)
or a crash stops that source only.

Bounded runs (`consumer.end`): each shard task reads up to the cursor of the end time and
commits it. A watcher polls the group's checkpoints (GetCheckPoint) until every shard of the
logstore (within `consumer.shards`) has one at or past its end cursor — the shards may be
spread over several daemons, and each of them sees the same checkpoints — then the source
shuts down as the daemon's shutdown does. The daemon exits 0 once all its sources have
stopped that way.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import structlog
from anyio.abc import TaskGroup

from loghubd.backoff import Backoff
from loghubd.config import ConsumerConfig, SourceSpec
from loghubd.consumer.assignment import Assignment
from loghubd.consumer.budget import ByteBudget
from loghubd.consumer.fetcher import PULL_BACKOFF, FetchSettings, ShardCatalog, reached
from loghubd.consumer.heartbeat import HeartbeatSettings, HeartbeatState, run_heartbeat
from loghubd.consumer.processing import RetryPolicy
from loghubd.consumer.shard import WINDOW_SETTLE_S, ShardContext
from loghubd.consumer.supervisor import Supervisor, Waker
from loghubd.ops import health
from loghubd.ops.metrics import Metrics
from loghubd.plugins.api import ProcessorContext
from loghubd.plugins.loaded import LoadedFactory
from loghubd.plugins.manager import Plugins
from loghubd.protocol import errors as E
from loghubd.protocol.signing import Credentials
from loghubd.sls import CredentialsProvider, SlsClient, Unreachable, provider_for

log = structlog.get_logger("loghubd.source")

STARTUP_BACKOFF = Backoff(initial=1.0, cap=30.0)


async def ensure_group(client: SlsClient, logstore: str, c: ConsumerConfig) -> None:
    """Create the group if it is missing; if it exists with other settings, keep them (every
    worker rewriting them would make the group's config flap between deployments)."""
    want = {"timeout": int(c.timeout), "order": c.order}
    for existing in await client.list_groups(logstore):
        if existing.get("name") == c.group:
            have = {"timeout": existing.get("timeout"), "order": existing.get("order")}
            if have != want:
                log.warning(
                    "consumer_group_settings_differ",
                    group=c.group,
                    server=have,
                    configured=want,
                    action="keeping the server's settings",
                )
            return
    try:
        await client.create_group(logstore, c.group, int(c.timeout), c.order)
        log.info("consumer_group_created", group=c.group, **want)
    except E.ConsumerGroupAlreadyExist:
        pass  # another worker created it first


class StartupError(Exception):
    """A source cannot start: a permanent error (bad credentials, missing logstore, a
    request the service refuses). Retrying would not help; the message says what to fix."""


async def _retry_until_ok(
    what: str,
    fn: Callable[[], Awaitable[None]],
    failing: Callable[[str], None] = lambda reason: None,
) -> None:
    """Start-up calls: a daemon under systemd waits out a service that is down or busy instead
    of crash-looping, but a permanent refusal (4xx) stops it at once with the reason. `what`
    says in an operator's words what was being done; `failing` is told why each attempt
    failed (the source's /status error and /readyz reason while it retries), "" at the end."""
    attempt = 0
    while True:
        try:
            await fn()
            failing("")
            return
        except E.SlsError as exc:
            if not exc.retryable:
                raise StartupError(f"{what}: {exc}") from exc
            attempt += 1
            wait = STARTUP_BACKOFF.wait(attempt)
            reason = f"{what}: {exc} (retrying)"
            if isinstance(exc, Unreachable):
                reason = f"{what}: cannot reach the service, retrying: {exc}"
            failing(reason)
            log.warning("startup_call_failed", call=what, error=str(exc)[:1000], retry_in_s=wait)
            await anyio.sleep(wait)


class SourceRunner:
    """One consumer of one logstore (one `[[sources]]` entry); `run` drives it.

    `state`: starting → running → stopping → stopped, or done (a bounded run finished), or
    failed (`error` says why).
    """

    def __init__(self, spec: SourceSpec, plugins: Plugins, consumer: str) -> None:
        self.spec = spec
        self.name = spec.name
        self.consumer = consumer
        self.metrics = Metrics()
        proc = spec.processor
        self.factory: LoadedFactory = plugins.create(proc.name, proc.selected_options)
        shards = spec.consumer.shards
        self.heartbeat = HeartbeatState()
        self.assignment = Assignment(None if shards is None else frozenset(shards))
        self.waker = Waker()
        self.window_waker = Waker()  # a shard finished its window: check the group sooner
        self.state = "starting"
        self.error = ""
        self.clean = True
        self.started_at = time.monotonic()
        self.client: SlsClient | None = None
        self.supervisor: Supervisor | None = None
        self.provider: CredentialsProvider = provider_for(spec.source)
        c = spec.consumer
        self._bind = {"group": c.group, "consumer": consumer}

    def credentials(self) -> Credentials:
        """The current credentials (`loghubd.sls.credentials`): a cache read, for every request."""
        return self.provider.get()

    def processor_context(self) -> ProcessorContext:
        s = self.spec.source
        return ProcessorContext(
            endpoint=s.endpoint,
            project=s.project,
            logstore=s.logstore,
            credentials=self.credentials,
            group=self.spec.consumer.group,
            consumer=self.consumer,
            auth_version=s.auth_version,
            region=s.region,
        )

    def session(self) -> aiohttp.ClientSession:
        """This source's own HTTP session (and connection pool): a source whose service hangs
        cannot use up the connections of the others."""
        c = self.spec.consumer
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=c.request_timeout)
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
        return aiohttp.ClientSession(timeout=timeout, connector=connector)

    def build(self, session: aiohttp.ClientSession) -> None:
        s, c = self.spec.source, self.spec.consumer
        client = SlsClient(
            session,
            s.endpoint,
            s.project,
            self.credentials,
            auth_version=s.auth_version,
            region=s.region,
            request_timeout=c.request_timeout,
            user_agent=f"loghubd/0.1-consumergroup-{c.group}-{self.consumer}",
            on_auth_error=self.provider.invalidate,
        )
        start = c.start if isinstance(c.start, str) else str(int(c.start))
        ctx = ShardContext(
            client=client,
            settings=FetchSettings(
                logstore=s.logstore,
                max_log_groups=c.max_fetch_log_groups,
                fetch_interval=c.fetch_interval,
                backoff=replace(PULL_BACKOFF, cap=c.pull_retry_max_backoff),
                query=c.query or None,
            ),
            group=c.group,
            consumer=self.consumer,
            start=start,
            factory=self.factory,
            retry=RetryPolicy(
                max_attempts=c.max_attempts,
                on_failure=c.on_failure,
                backoff=Backoff(
                    initial=c.retry_initial_backoff,
                    cap=c.processor_retry_max_backoff,
                    jitter=0.5,
                ),
                dead_letter_dir=Path(c.dead_letter_dir),
            ),
            metrics=self.metrics,
            budget=ByteBudget(c.max_bytes_in_flight, self.metrics),
            catalog=ShardCatalog(client, s.logstore),
            lease_valid=lambda: self.heartbeat.lease_valid(c.timeout),
            end=c.end,
            on_finished=self.window_waker.wake,
            checkpoint_interval=c.checkpoint_interval,
        )
        self.client = client
        self.supervisor = Supervisor(ctx, self.assignment, self.metrics, self.waker)

    # -- what the ops surface reads -----------------------------------------------------------

    def _tasks(self) -> list[Any]:
        sup = self.supervisor
        return [] if sup is None else [*sup.tasks.values(), *sup.parked.values()]

    def snapshot(self) -> health.Snapshot:
        now = time.monotonic()
        c = self.spec.consumer
        return health.Snapshot(
            joined=self.heartbeat.joined,
            seconds_since_heartbeat=now - self.heartbeat.last_ok,
            heartbeat_interval=c.heartbeat_interval,
            timeout=c.timeout,
            last_heartbeat_error=self.heartbeat.last_error or self.provider.problem,
            shards=tuple(
                health.ShardView(
                    t.shard,
                    t.status.state,
                    t.status.reason or t.status.processor_error,
                    t.status.caught_up,
                    now - t.status.last_progress,
                    now - (t.status.fetch.last_pull or self.started_at),
                )
                for t in self._tasks()
            ),
            starting=self.state == "starting",
            start_problem=self.error if self.state == "starting" else "",
        )

    def _starting_problem(self, reason: str) -> None:
        """Why start-up is not through yet ("" once it is): shown as the source's `error`."""
        if self.state == "starting":
            self.error = reason

    def source_state(self) -> health.SourceState:
        failed = self.error if self.state == "failed" else ""
        return health.SourceState(self.name, self.snapshot(), failed, self.state == "done")

    def status(self) -> dict[str, Any]:
        s, c = self.spec.source, self.spec.consumer
        return {
            "name": self.name,
            "state": self.state,
            "error": self.error,
            "consumer": self.consumer,
            "group": c.group,
            "endpoint": s.endpoint,
            "project": s.project,
            "logstore": s.logstore,
            "credentials": self.provider.describe(),
            "shard_filter": None if c.shards is None else list(c.shards),
            "end": c.end,
            "joined": self.heartbeat.joined,
            "held": self.assignment.report(),
            "assigned_outside_filter": sorted(self.heartbeat.unwanted),
            "shards": [
                {
                    "shard": t.shard,
                    "state": t.status.state,
                    "reason": t.status.reason,
                    "cursor": t.status.fetch.cursor,
                    "checkpoint": t.tracker.committed if t.tracker else None,
                    "lag_log_groups": t.status.fetch.lag_log_groups,
                    "lag_seconds": t.status.fetch.lag_seconds,
                    "caught_up": t.status.caught_up,
                    "processor_error": t.status.processor_error,
                }
                for t in sorted(self._tasks(), key=lambda t: t.shard)
            ],
        }

    # -- running -----------------------------------------------------------------------------

    async def run(self, stop: anyio.Event, started: Callable[[], None]) -> None:
        """Consume until `stop` is set (or, bounded, until the group is done). Never raises
        an Exception: a source that fails is marked failed and the others go on. `started`
        is called once, when the source runs or has given up."""
        called = False

        def started_once() -> None:
            nonlocal called
            if not called:
                called = True
                started()

        with structlog.contextvars.bound_contextvars(source=self.name):
            try:
                await self._run(stop, started_once)
            except Exception as exc:
                self.state, self.error, self.clean = "failed", repr(exc)[:500], False
                log.exception("source_crashed", **self._bind, error=self.error)
            finally:
                if self.state == "starting":
                    self.state = "stopped"
                started_once()

    async def _run(self, stop: anyio.Event, started: Callable[[], None]) -> None:
        spec, c = self.spec, self.spec.consumer
        client, supervisor = self.client, self.supervisor
        assert client is not None and supervisor is not None, "build() first"
        bind = self._bind
        try:
            async with anyio.create_task_group() as tg:
                with anyio.CancelScope() as startup:
                    tg.start_soon(_cancel_when, stop, startup)
                    try:
                        # The first load is done before it reports started (a file or a
                        # command's credentials); it then keeps them fresh until we stop.
                        await tg.start(self.provider.run_refresh)
                        where = f"{spec.source.project}/{spec.source.logstore}"
                        await _retry_until_ok(
                            f"finding or creating consumer group {c.group} on {where} at "
                            f"{spec.source.endpoint}",
                            lambda: ensure_group(client, spec.source.logstore, c),
                            self._starting_problem,
                        )
                        if self.factory.bind is not None:
                            self.factory.bind(self.processor_context())
                        if self.factory.start is not None:
                            await self.factory.start()
                    except StartupError as exc:
                        self.state, self.error, self.clean = "failed", str(exc), False
                        log.error("source_cannot_start", **bind, error=self.error)
                        tg.cancel_scope.cancel()
                        return
                if stop.is_set():
                    tg.cancel_scope.cancel()
                    return
                await self._consume(tg, stop, started, client, supervisor)
                tg.cancel_scope.cancel()
        finally:
            close = self.factory.close
            if close is not None and self.state not in ("starting", "failed"):
                with anyio.CancelScope(shield=True):
                    await close()
        if supervisor.unflushed:
            self.clean = False
            log.error("shutdown_unclean", **bind, unflushed_shards=supervisor.unflushed)
        else:
            log.info("source_stopped", **bind, state=self.state)

    async def _consume(
        self,
        tg: TaskGroup,
        stop: anyio.Event,
        started: Callable[[], None],
        client: SlsClient,
        supervisor: Supervisor,
    ) -> None:
        spec, c, bind = self.spec, self.spec.consumer, self._bind
        self.state = "running"
        await tg.start(supervisor.run)
        heartbeat_stop, heartbeat_done = anyio.Event(), anyio.Event()

        async def heartbeat() -> None:
            try:
                await run_heartbeat(
                    client,
                    HeartbeatSettings(
                        logstore=spec.source.logstore,
                        group=c.group,
                        consumer=self.consumer,
                        interval=c.heartbeat_interval,
                        timeout=c.timeout,
                        allowed=c.shards,
                    ),
                    self.assignment,
                    supervisor,
                    self.metrics,
                    self.heartbeat,
                    self.waker,
                    heartbeat_stop,
                )
            finally:
                heartbeat_done.set()

        tg.start_soon(heartbeat)
        window_done = anyio.Event()
        if c.end is not None:
            tg.start_soon(self._watch_window, client, window_done)
        log.info(
            "consumer_started",
            **bind,
            processor=spec.processor.name,
            logstore=spec.source.logstore,
            shards=None if c.shards is None else list(c.shards),
            end=c.end,
        )
        started()
        await _wait_any(stop, window_done)
        bounded_done = window_done.is_set() and not stop.is_set()
        log.info("shutdown_started", **bind, grace_s=c.shutdown_grace, window_done=bounded_done)
        self.state = "stopping"
        clean = await supervisor.stop_all(c.shutdown_grace)
        # Heartbeats stop before the leave, and the one in flight is answered first: a
        # heartbeat reaching the server after the leave would re-join us (with no shards),
        # the balancer would hand us free shards, and they would sit idle until the group
        # timeout instead of going to the others at once.
        heartbeat_stop.set()
        self.waker.wake()
        with anyio.move_on_after(c.timeout):
            await heartbeat_done.wait()
        with anyio.move_on_after(c.request_timeout):
            try:
                await client.leave(spec.source.logstore, c.group, self.consumer)
                log.info("left_group", **bind)
            except E.SlsError as exc:
                log.info("leave_not_supported", **bind, error=str(exc)[:200])
        self.clean = clean
        self.state = "done" if bounded_done else "stopped"

    async def _watch_window(self, client: SlsClient, done: anyio.Event) -> None:
        """Bounded run: set `done` once every shard of the group (within `consumer.shards`)
        has a checkpoint at or past the cursor of `consumer.end`, whoever consumed it."""
        c, logstore = self.spec.consumer, self.spec.source.logstore
        assert c.end is not None
        ends: dict[int, str] = {}  # shard → the window's end cursor (stable once resolved)
        while True:
            await self.window_waker.sleep(c.heartbeat_interval)
            if time.time() < c.end + WINDOW_SETTLE_S:
                continue
            try:
                pending = await self._window_pending(client, logstore, c, ends)
            except E.SlsError as exc:
                log.warning("window_check_failed", **self._bind, error=str(exc)[:300])
                continue
            if not pending:
                log.info("window_complete", **self._bind, end=c.end, shards=sorted(ends))
                done.set()
                return

    async def _window_pending(
        self, client: SlsClient, logstore: str, c: ConsumerConfig, ends: dict[int, str]
    ) -> list[int]:
        assert c.end is not None
        shards = [int(s["shardID"]) for s in await client.list_shards(logstore)]
        if c.shards is not None:
            shards = [s for s in shards if s in c.shards]
        checkpoints = {
            int(cp["shard"]): str(cp.get("checkpoint") or "")
            for cp in await client.checkpoints(logstore, c.group)
        }
        pending = []
        for shard in shards:
            checkpoint = checkpoints.get(shard, "")
            if not checkpoint:
                pending.append(shard)
                continue
            if shard not in ends:
                ends[shard] = await client.get_cursor(logstore, shard, str(int(c.end)))
            if not reached(checkpoint, ends[shard]):
                pending.append(shard)
        return pending


async def _wait_any(*events: anyio.Event) -> None:
    async with anyio.create_task_group() as tg:

        async def wait(event: anyio.Event) -> None:
            await event.wait()
            tg.cancel_scope.cancel()

        for event in events:
            tg.start_soon(wait, event)


async def _cancel_when(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()
