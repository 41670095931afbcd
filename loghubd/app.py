"""Composition root of `loghubd run`: builds every object, owns the root task group and the
bounded shutdown.

One daemon consumes one or more sources (`[[sources]]`, or the single `[source]` form named
"default") in one event loop. Each `SourceRunner` is one consumer of one logstore, with its
own HTTP session, client, assignment, supervisor, heartbeat, flusher, processor factory and
metrics; `Daemon` owns the ops listener, the shutdown trigger and the runners. Every log line
a runner's tasks write carries `source=<name>` (structlog context variables, inherited by the
tasks it starts), and `/metrics` labels every series with it.

Sources are independent: a source whose service is down keeps retrying by itself (heartbeats
and pulls already do), readiness names it, and the others go on. A permanent start-up error
(`StartupError`: bad credentials, a missing logstore) or a crash stops that source only: it is
logged, `/readyz` reports it, and the daemon exits 1 at shutdown. When every source failed
to start, the daemon exits 1 at once.

Shutdown order, per source (SIGTERM/SIGINT, or the injected trigger in tests): stop fetching;
let in-flight batches finish within `shutdown_grace` while heartbeats go on (so the shards
stay ours meanwhile); commit fenced checkpoints; run processor shutdowns; hand the shards back
(`leave`, a loghubd extension; against a server without it we simply stop heartbeating and
the group timeout frees them); exit 0 — or 1 when some checkpoint could not be flushed.

Bounded runs (`consumer.end`): each shard task reads up to the cursor of the end time and
commits it. A watcher polls the group's checkpoints (GetCheckPoint) until every shard of the
logstore (within `consumer.shards`) has one at or past its end cursor — the shards may be
spread over several daemons, and each of them sees the same checkpoints — then the source
shuts down as above. The daemon exits 0 once all its sources have stopped that way.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import structlog
from anyio.abc import TaskGroup

from loghubd.config import Config, ConsumerConfig, SourceSpec
from loghubd.consumer.assignment import Assignment
from loghubd.consumer.client import SlsClient
from loghubd.consumer.fetcher import ByteBudget, FetchSettings, ShardCatalog, reached
from loghubd.consumer.flusher import run_flusher
from loghubd.consumer.heartbeat import HeartbeatSettings, HeartbeatState, run_heartbeat
from loghubd.consumer.shard import WINDOW_SETTLE_S, ShardContext
from loghubd.consumer.supervisor import Supervisor, Waker
from loghubd.consumer.worker import RetryPolicy, call
from loghubd.credentials import CredentialsProvider, provider_for
from loghubd.ops import health
from loghubd.ops.metrics import Metrics, labelled_by_source
from loghubd.ops.server import make_app, serve_ops
from loghubd.plugins.api import ProcessorContext, ProcessorFactory
from loghubd.plugins.manager import Plugins
from loghubd.protocol import errors as E
from loghubd.protocol.signing import Credentials

log = structlog.get_logger("loghubd.app")


def default_consumer_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


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


async def _retry_until_ok(what: str, fn: Callable[[], Awaitable[None]]) -> None:
    """Start-up calls: a daemon under systemd waits out a service that is down or busy instead
    of crash-looping, but a permanent refusal (4xx) stops it at once with the reason."""
    attempt = 0
    while True:
        try:
            await fn()
            return
        except E.SlsError as exc:
            if not exc.retryable:
                raise StartupError(f"{what}: {exc}") from exc
            attempt += 1
            wait = min(30.0, 0.5 * 2 ** min(attempt, 6))
            log.warning("startup_call_failed", call=what, error=str(exc)[:300], retry_in_s=wait)
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
        self.factory: ProcessorFactory = plugins.processor(proc.name).create(proc.selected_options)
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
        """The current credentials (`loghubd.credentials`): a cache read, for every request."""
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
                s.logstore,
                c.max_fetch_log_groups,
                c.fetch_interval,
                c.retry_max_backoff,
                c.query or None,
            ),
            group=c.group,
            consumer=self.consumer,
            start=start,
            factory=self.factory,
            retry=RetryPolicy(
                c.max_attempts,
                c.on_failure,
                c.retry_initial_backoff,
                c.retry_max_backoff,
                Path(c.dead_letter_dir),
            ),
            metrics=self.metrics,
            budget=ByteBudget(c.max_bytes_in_flight, self.metrics),
            catalog=ShardCatalog(client, s.logstore),
            lease_valid=lambda: self.heartbeat.lease_valid(c.timeout),
            end=c.end,
            on_finished=self.window_waker.wake,
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
                    t.status.reason,
                    t.status.fetch.caught_up,
                    now - t.status.last_progress,
                    now - (t.status.fetch.last_pull or self.started_at),
                )
                for t in self._tasks()
            ),
            starting=self.state == "starting",
        )

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
                    "caught_up": t.status.fetch.caught_up,
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
                        await _retry_until_ok(
                            "ensure_group", lambda: ensure_group(client, spec.source.logstore, c)
                        )
                        bind_factory = getattr(self.factory, "bind", None)
                        if bind_factory is not None:
                            bind_factory(self.processor_context())
                        start_factory = getattr(self.factory, "start", None)
                        if start_factory is not None:
                            await call(start_factory)
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
            close = getattr(self.factory, "close", None)
            if close is not None and self.state not in ("starting", "failed"):
                with anyio.CancelScope(shield=True):
                    await call(close)
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
                        spec.source.logstore,
                        c.group,
                        self.consumer,
                        c.heartbeat_interval,
                        c.timeout,
                        c.shards,
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
        tg.start_soon(run_flusher, supervisor, c.checkpoint_interval, self.metrics)
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


class Daemon:
    """The whole `loghubd run`: one `SourceRunner` per source, the ops listener, shutdown."""

    def __init__(self, cfg: Config, plugins: Plugins) -> None:
        self.cfg = cfg
        self.consumer = cfg.consumer.name or default_consumer_name()
        self.runners: list[SourceRunner] = []
        for spec in cfg.sources:
            try:
                self.runners.append(SourceRunner(spec, plugins, self.consumer))
            except ValueError as exc:  # the processor refused its options
                if not cfg.multi:
                    raise
                raise ValueError(f"sources.{spec.name}: {exc}") from exc

    def verdict(self) -> health.Verdict:
        return health.readiness_of_sources([r.source_state() for r in self.runners])

    def status(self) -> dict[str, Any]:
        """The first source's fields at the top level (what a single-source daemon always
        showed), and every source under `sources`."""
        sources = [r.status() for r in self.runners]
        first = {k: v for k, v in sources[0].items() if k not in ("name", "state", "error")}
        return {**first, "sources": sources}

    async def run(
        self,
        shutdown_trigger: Callable[[], Awaitable[None]],
        *,
        on_ready: Callable[[str], None] = lambda _state: None,
        watchdog_interval: float = 0.0,
    ) -> int:
        """Run until `shutdown_trigger` returns, or until every source has stopped by itself
        (bounded runs done, or failed). `on_ready` receives sd_notify states (READY=1,
        WATCHDOG=1, STOPPING=1); WATCHDOG=1 is sent every `watchdog_interval` seconds from the
        event loop itself, so a stuck loop stops the pings. Raises StartupError when no source
        could start."""
        cfg = self.cfg
        async with contextlib.AsyncExitStack() as stack:
            for runner in self.runners:
                runner.build(await stack.enter_async_context(runner.session()))
            registry = labelled_by_source([(r.name, r.metrics.registry) for r in self.runners])
            ops_app = make_app(registry, self.verdict, self.status, cfg.ops.status_token)
            async with anyio.create_task_group() as tg:
                port = await tg.start(serve_ops, ops_app, cfg.ops.listen)
                log.info("ops_listening", listen=f"{cfg.ops.host}:{port}")
                stop = anyio.Event()

                async def trigger() -> None:
                    await shutdown_trigger()
                    on_ready("STOPPING=1")
                    stop.set()

                tg.start_soon(trigger)
                waiting = len(self.runners)
                settled = anyio.Event()

                def started() -> None:
                    # Ready once one source runs: a source whose service is down at start-up
                    # retries for as long as it takes, and must not hold the others back
                    # (systemd would time the whole daemon out).
                    nonlocal waiting
                    waiting -= 1
                    if waiting == 0 or any(r.state == "running" for r in self.runners):
                        settled.set()

                async with anyio.create_task_group() as sources:
                    for runner in self.runners:
                        sources.start_soon(runner.run, stop, started, name=f"source-{runner.name}")
                    await settled.wait()
                    if any(r.state not in ("failed", "stopped") for r in self.runners):
                        on_ready("READY=1")
                        if watchdog_interval:
                            tg.start_soon(_watchdog, on_ready, watchdog_interval)
                tg.cancel_scope.cancel()
        failed = [r for r in self.runners if r.state == "failed"]
        if failed and len(failed) == len(self.runners):
            raise StartupError("; ".join(_named(r, len(self.runners)) for r in failed))
        unclean = [r.name for r in self.runners if not r.clean]
        if unclean:
            log.error("daemon_stopped", unclean_sources=unclean)
            return 1
        log.info("shutdown_complete")
        return 0


def _named(runner: SourceRunner, count: int) -> str:
    return runner.error if count == 1 else f"source {runner.name}: {runner.error}"


async def _wait_any(*events: anyio.Event) -> None:
    async with anyio.create_task_group() as tg:

        async def wait(event: anyio.Event) -> None:
            await event.wait()
            tg.cancel_scope.cancel()

        for event in events:
            tg.start_soon(wait, event)


async def _watchdog(notify: Callable[[str], None], interval: float) -> None:
    while True:
        notify("WATCHDOG=1")
        await anyio.sleep(interval)


async def _cancel_when(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()
