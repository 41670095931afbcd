"""One source of `loghubd run`: one consumer of one logstore (`SourceRunner`), wired and run.

Each runner has its own HTTP session, client, assignment, supervisor, heartbeat, processor
factory and metrics. Every log line its tasks write carries `source=<name>` (structlog
context variables, inherited by the tasks it starts), and `/metrics` labels every series with
it. A source whose service is down keeps retrying by itself (heartbeats and pulls already
do); a permanent start-up error (`StartupError`, `startup`) or a crash stops that source only.

What it does not do itself: start-up calls (`startup`), the bounded-run window (`window`),
the ops views (`loghubd.ops.views`, from the `snapshot` it takes).
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

import aiohttp
import anyio
import structlog
from anyio.abc import TaskGroup

from loghubd.backoff import Backoff
from loghubd.config import SourceSpec
from loghubd.consumer import window
from loghubd.consumer.assignment import Assignment
from loghubd.consumer.budget import ByteBudget
from loghubd.consumer.fetcher import PULL_BACKOFF, FetchSettings, ShardCatalog
from loghubd.consumer.heartbeat import HeartbeatSettings, HeartbeatState, run_heartbeat
from loghubd.consumer.processing import RetryPolicy
from loghubd.consumer.shard import ShardContext
from loghubd.consumer.snapshot import HeartbeatSnapshot, SourceSnapshot
from loghubd.consumer.startup import (
    StartupError,
    check_against_the_logstore,
    ensure_group,
    retry_until_ok,
    start_refused,
)
from loghubd.consumer.supervisor import Supervisor, Waker
from loghubd.consumer.terms import GroupTerms
from loghubd.errors import describe_error
from loghubd.logging import traceback_of
from loghubd.ops.metrics import Metrics
from loghubd.plugins.api import ProcessorContext
from loghubd.plugins.loaded import LoadedFactory
from loghubd.plugins.manager import Plugins
from loghubd.protocol import errors as E
from loghubd.protocol.signing import Credentials
from loghubd.sls import CredentialsProvider, SlsClient, provider_for
from loghubd.sls.endpoint import client_proxy

log = structlog.get_logger("loghubd.source")


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
        c = spec.consumer
        shards = c.shards
        self.heartbeat = HeartbeatState()
        # The group's timeout as the service holds it (read at start, then by the heartbeats).
        self.terms = GroupTerms(configured_interval=c.heartbeat_interval, timeout=c.timeout)
        self.assignment = Assignment(None if shards is None else frozenset(shards))
        self.waker = Waker()
        self.window_waker = Waker()  # a shard finished its window: check the group sooner
        self.state = "starting"
        self.error = ""
        self.step = "reading the credentials"  # what start-up is doing (while `starting`)
        self.exit_code = 1  # of a start-up the service refused (StartupError.exit_code)
        self.clean = True
        self.started_at = time.monotonic()
        self.client: SlsClient | None = None
        self.supervisor: Supervisor | None = None
        self.provider: CredentialsProvider = provider_for(spec.source)
        # From HTTP(S)_PROXY / NO_PROXY; a proxy that cannot be used is refused here, at start.
        self.proxy = client_proxy(spec.source.endpoint, spec.source.project, os.environ)
        self._bind = {"group": c.group, "consumer": consumer}

    def credentials(self) -> Credentials:
        """The current credentials (`loghubd.sls.credentials`): a cache read, for every request."""
        return self.provider.get()

    def processor_context(self) -> ProcessorContext:
        return ProcessorContext.of_source(
            self.spec, self.consumer, self.credentials, self.metrics.registry
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
                idle_fetch_interval=c.idle_fetch_interval,
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
                origin=self.spec.letter_origin,
            ),
            metrics=self.metrics,
            budget=ByteBudget(c.max_bytes_in_flight, self.metrics),
            catalog=ShardCatalog(client, s.logstore),
            lease_valid=lambda: self.heartbeat.lease_valid(self.terms.timeout),
            end=c.end,
            on_finished=self.window_waker.wake,
            checkpoint_interval=c.checkpoint_interval,
        )
        self.client = client
        self.supervisor = Supervisor(ctx, self.assignment, self.metrics, self.waker)

    # -- what the ops surface reads -----------------------------------------------------------

    def snapshot(self) -> SourceSnapshot:
        """This source as it is now (`loghubd.consumer.snapshot`)."""
        now = time.monotonic()
        s, c, hb = self.spec.source, self.spec.consumer, self.heartbeat
        sup = self.supervisor
        same = None if sup is None else sup.same_name_lately(now)
        return SourceSnapshot(
            name=self.name,
            state=self.state,
            error=self.error,
            consumer=self.consumer,
            group=c.group,
            endpoint=s.endpoint,
            proxy=self.proxy.url if self.proxy else "",
            project=s.project,
            logstore=s.logstore,
            credentials=MappingProxyType(self.provider.describe()),
            shard_filter=c.shards,
            end=c.end,
            starting=self.state == "starting",
            step=self.step if self.state == "starting" else "",
            heartbeat=HeartbeatSnapshot(
                joined=hb.joined,
                seconds_since_ok=now - hb.last_ok,
                interval=self.terms.interval,
                timeout=self.terms.timeout,
                last_error=hb.last_error or self.provider.problem,
            ),
            held=tuple(self.assignment.report()),
            assigned_outside_filter=tuple(sorted(hb.unwanted)),
            shards=() if sup is None else sup.shard_snapshots(now, self.started_at),
            taken_at=time.time(),
            same_name_shards=() if same is None else same.shards,
            seconds_since_same_name=None if same is None else now - same.at,
        )

    def _starting_problem(self, reason: str) -> None:
        """Why start-up is not through yet ("" once it is): shown as the source's `error`."""
        if self.state == "starting":
            self.error = reason

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
                self.state, self.error, self.clean = "failed", describe_error(exc)[:500], False
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
        factory_started = False  # its close is owed, even if a stop comes before consuming
        try:
            async with anyio.create_task_group() as tg:
                with anyio.CancelScope() as startup:
                    tg.start_soon(_cancel_when, stop, startup)
                    try:
                        # The first load is done before it reports started (a file or a
                        # command's credentials); it then keeps them fresh until we stop.
                        await tg.start(self.provider.run_refresh)
                        where = f"{spec.source.project}/{spec.source.logstore}"
                        self.step = (
                            f"finding or creating consumer group {c.group} on {where} at "
                            f"{spec.source.endpoint}"
                        )
                        await retry_until_ok(
                            self.step,
                            lambda: ensure_group(client, spec.source.logstore, c, self.terms),
                            self._starting_problem,
                            explain=functools.partial(_explain_refusal, spec),
                            endpoint_key=f"{spec.keys}.endpoint",
                        )
                        keys = f"{spec.keys}.consumer" if spec.multi else "consumer"
                        self.step = "checking the configuration against the logstore"
                        await retry_until_ok(
                            self.step,
                            lambda: check_against_the_logstore(
                                client, spec.source.logstore, c, keys
                            ),
                            self._starting_problem,
                        )
                        self.step = "starting the processor"
                        if self.factory.bind is not None:
                            self.factory.bind(self.processor_context())
                        if self.factory.start is not None:
                            try:
                                await self.factory.start()
                            except Exception as exc:
                                factory_started = stop.is_set()
                                raise start_refused(spec.processor.name, exc) from exc
                            except BaseException:
                                # Cut short by the stop: what it opened yet is closed.
                                factory_started = stop.is_set()
                                raise
                        factory_started = True
                    except StartupError as exc:
                        self.state, self.error, self.clean = "failed", str(exc), False
                        self.exit_code = exc.exit_code
                        cause = exc.__cause__
                        log.error(
                            "source_cannot_start",
                            **bind,
                            error=self.error,
                            **(traceback_of(cause) if cause is not None else {}),
                        )
                        tg.cancel_scope.cancel()
                        return
                if stop.is_set():
                    tg.cancel_scope.cancel()
                    return
                await self._consume(tg, stop, started, client, supervisor)
                tg.cancel_scope.cancel()
        finally:
            close = self.factory.close
            if close is not None and (factory_started or self.state not in ("starting", "failed")):
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
                        terms=self.terms,
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
        window_failed: list[int] = []  # shards that failed for good: the window cannot end
        if c.end is not None:
            tg.start_soon(
                functools.partial(
                    window.watch_group,
                    client,
                    logstore=spec.source.logstore,
                    group=c.group,
                    end=c.end,
                    shards=c.shards,
                    every=c.heartbeat_interval,
                    sleep=self.window_waker.sleep,
                    done=window_done,
                    bind=bind,
                    blocked=supervisor.window_blocked,
                    give_up=window_failed.extend,
                    tally=self.metrics.window_tally,
                )
            )
        log.info(
            "consumer_started",
            **bind,
            processor=spec.processor.name,
            logstore=spec.source.logstore,
            shards=None if c.shards is None else list(c.shards),
            end=c.end,
            **({"proxy": self.proxy.url, "proxy_from": self.proxy.variable} if self.proxy else {}),
        )
        started()
        await _wait_any(stop, window_done)
        bounded_done = window_done.is_set() and not stop.is_set() and not window_failed
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
            except E.ConsumerGroupNotExist as exc:  # deleted under us: nothing to leave
                log.warning("group_gone", **bind, error=str(exc)[:200])
            except E.SlsError as exc:
                log.info("leave_not_supported", **bind, error=str(exc)[:200])
        self.clean = clean
        self.state = "done" if bounded_done else "stopped"


def _explain_refusal(spec: SourceSpec, exc: E.SlsError) -> str:
    """`loghubd.admin.connect.explain_refusal`, imported only when a start-up call is refused
    (the admin views are no part of a daemon's start-up)."""
    from loghubd.admin.connect import explain_refusal

    return explain_refusal(spec, exc)


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
