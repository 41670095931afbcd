"""Composition root of `loghubd run`: builds every object, owns the root task group and the
bounded shutdown.

Shutdown order (SIGTERM/SIGINT, or the injected trigger in tests): stop fetching; let
in-flight batches finish within `shutdown_grace` while heartbeats go on (so the shards stay
ours meanwhile); commit fenced checkpoints; run processor shutdowns; hand the shards back
(`leave`, a loghubd extension; against a server without it we simply stop heartbeating and
the group timeout frees them); exit 0 — or 1 when some checkpoint could not be flushed.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import structlog

from loghubd.config import Config
from loghubd.consumer.assignment import Assignment
from loghubd.consumer.client import SlsClient
from loghubd.consumer.fetcher import ByteBudget, FetchSettings, ShardCatalog
from loghubd.consumer.flusher import run_flusher
from loghubd.consumer.heartbeat import HeartbeatSettings, HeartbeatState, run_heartbeat
from loghubd.consumer.shard import ShardContext
from loghubd.consumer.supervisor import Supervisor, Waker
from loghubd.consumer.worker import RetryPolicy, call
from loghubd.ops import health
from loghubd.ops.metrics import Metrics
from loghubd.ops.server import make_app, serve_ops
from loghubd.plugins.api import ProcessorContext, ProcessorFactory
from loghubd.plugins.manager import Plugins
from loghubd.protocol import errors as E
from loghubd.protocol.signing import Credentials

log = structlog.get_logger("loghubd.app")


def default_consumer_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


async def ensure_group(client: SlsClient, cfg: Config) -> None:
    """Create the group if it is missing; if it exists with other settings, keep them (every
    worker rewriting them would make the group's config flap between deployments)."""
    c = cfg.consumer
    want = {"timeout": int(c.timeout), "order": c.order}
    for existing in await client.list_groups(cfg.source.logstore):
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
        await client.create_group(cfg.source.logstore, c.group, int(c.timeout), c.order)
        log.info("consumer_group_created", group=c.group, **want)
    except E.ConsumerGroupAlreadyExist:
        pass  # another worker created it first


class StartupError(Exception):
    """The daemon cannot start: a permanent error (bad credentials, missing logstore, a
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


class Daemon:
    """Everything one consumer holds; `run` drives it."""

    def __init__(self, cfg: Config, plugins: Plugins) -> None:
        self.cfg = cfg
        self.consumer = cfg.consumer.name or default_consumer_name()
        self.metrics = Metrics()
        spec = plugins.processor(cfg.processor.name)
        self.factory: ProcessorFactory = spec.create(cfg.processor.selected_options)
        self.heartbeat = HeartbeatState()
        self.assignment = Assignment()
        self.waker = Waker()
        self.starting = True
        self.started_at = time.monotonic()

    def credentials(self) -> Credentials:
        s = self.cfg.source
        return Credentials(s.access_key_id, s.access_key_secret, s.security_token)

    def processor_context(self) -> ProcessorContext:
        s = self.cfg.source
        return ProcessorContext(
            endpoint=s.endpoint,
            project=s.project,
            logstore=s.logstore,
            credentials=self.credentials,
            group=self.cfg.consumer.group,
            consumer=self.consumer,
            auth_version=s.auth_version,
            region=s.region,
        )

    def build(self, session: aiohttp.ClientSession) -> tuple[SlsClient, Supervisor]:
        s, c = self.cfg.source, self.cfg.consumer
        client = SlsClient(
            session,
            s.endpoint,
            s.project,
            self.credentials,
            auth_version=s.auth_version,
            region=s.region,
            request_timeout=c.request_timeout,
            user_agent=f"loghubd/0.1-consumergroup-{c.group}-{self.consumer}",
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
        )
        return client, Supervisor(ctx, self.assignment, self.metrics, self.waker)

    def snapshot(self, supervisor: Supervisor) -> health.Snapshot:
        now = time.monotonic()
        tasks = [*supervisor.tasks.values(), *supervisor.parked.values()]
        return health.Snapshot(
            joined=self.heartbeat.joined,
            seconds_since_heartbeat=now - self.heartbeat.last_ok,
            heartbeat_interval=self.cfg.consumer.heartbeat_interval,
            timeout=self.cfg.consumer.timeout,
            last_heartbeat_error=self.heartbeat.last_error,
            shards=tuple(
                health.ShardView(
                    t.shard,
                    t.status.state,
                    t.status.reason,
                    t.status.fetch.caught_up,
                    now - t.status.last_progress,
                    now - (t.status.fetch.last_pull or self.started_at),
                )
                for t in tasks
            ),
            starting=self.starting,
        )

    def status(self, supervisor: Supervisor) -> dict[str, Any]:
        tasks = [*supervisor.tasks.values(), *supervisor.parked.values()]
        return {
            "consumer": self.consumer,
            "group": self.cfg.consumer.group,
            "project": self.cfg.source.project,
            "logstore": self.cfg.source.logstore,
            "joined": self.heartbeat.joined,
            "held": self.assignment.report(),
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
                for t in sorted(tasks, key=lambda t: t.shard)
            ],
        }

    async def run(
        self,
        shutdown_trigger: Callable[[], Awaitable[None]],
        *,
        on_ready: Callable[[str], None] = lambda _state: None,
        watchdog_interval: float = 0.0,
    ) -> int:
        """Run until `shutdown_trigger` returns. `on_ready` receives sd_notify states
        (READY=1, WATCHDOG=1, STOPPING=1); WATCHDOG=1 is sent every `watchdog_interval`
        seconds from the event loop itself, so a stuck loop stops the pings."""
        cfg = self.cfg
        bind = {"group": cfg.consumer.group, "consumer": self.consumer}
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=cfg.consumer.request_timeout)
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
            client, supervisor = self.build(session)
            ops_app = make_app(
                self.metrics,
                lambda: self.snapshot(supervisor),
                lambda: self.status(supervisor),
                cfg.ops.status_token,
            )
            clean = False
            async with anyio.create_task_group() as tg:
                port = await tg.start(serve_ops, ops_app, cfg.ops.listen)
                log.info("ops_listening", listen=f"{cfg.ops.host}:{port}", **bind)
                stop = anyio.Event()

                async def trigger() -> None:
                    await shutdown_trigger()
                    stop.set()

                tg.start_soon(trigger)
                with anyio.CancelScope() as startup:
                    tg.start_soon(_cancel_when, stop, startup)
                    await _retry_until_ok("ensure_group", lambda: ensure_group(client, cfg))
                    bind_factory = getattr(self.factory, "bind", None)
                    if bind_factory is not None:
                        bind_factory(self.processor_context())
                    start_factory = getattr(self.factory, "start", None)
                    if start_factory is not None:
                        await call(start_factory)
                if stop.is_set():
                    tg.cancel_scope.cancel()
                    return 0
                self.starting = False
                await tg.start(supervisor.run)
                heartbeat_stop, heartbeat_done = anyio.Event(), anyio.Event()

                async def heartbeat() -> None:
                    try:
                        await run_heartbeat(
                            client,
                            HeartbeatSettings(
                                cfg.source.logstore,
                                cfg.consumer.group,
                                self.consumer,
                                cfg.consumer.heartbeat_interval,
                                cfg.consumer.timeout,
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
                tg.start_soon(
                    run_flusher, supervisor, cfg.consumer.checkpoint_interval, self.metrics
                )
                log.info("consumer_started", **bind, processor=cfg.processor.name)
                on_ready("READY=1")
                if watchdog_interval:
                    tg.start_soon(_watchdog, on_ready, watchdog_interval)
                await stop.wait()
                log.info("shutdown_started", **bind, grace_s=cfg.consumer.shutdown_grace)
                on_ready("STOPPING=1")
                clean = await supervisor.stop_all(cfg.consumer.shutdown_grace)
                # Heartbeats stop before the leave, and the one in flight is answered first:
                # a heartbeat reaching the server after the leave would re-join us (with no
                # shards), the balancer would hand us free shards, and they would sit idle
                # until the group timeout instead of going to the others at once.
                heartbeat_stop.set()
                self.waker.wake()
                with anyio.move_on_after(cfg.consumer.timeout):
                    await heartbeat_done.wait()
                with anyio.move_on_after(cfg.consumer.request_timeout):
                    try:
                        await client.leave(cfg.source.logstore, cfg.consumer.group, self.consumer)
                        log.info("left_group", **bind)
                    except E.SlsError as exc:
                        log.info("leave_not_supported", **bind, error=str(exc)[:200])
                tg.cancel_scope.cancel()
            close = getattr(self.factory, "close", None)
            if close is not None:
                with anyio.CancelScope(shield=True):
                    await call(close)
        if not clean:
            log.error("shutdown_unclean", **bind, unflushed_shards=supervisor.unflushed)
            return 1
        log.info("shutdown_complete", **bind)
        return 0


async def _watchdog(notify: Callable[[str], None], interval: float) -> None:
    while True:
        notify("WATCHDOG=1")
        await anyio.sleep(interval)


async def _cancel_when(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()
