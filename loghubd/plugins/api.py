"""What a processor plugin implements: the seams between the daemon and user code.

A plugin registers :class:`ProcessorSpec` values through the `loghubd_register_processors`
hook. At start-up the daemon calls ``spec.create(options)`` once, with the processor's own
``[processor.<name>]`` table; the result is a :class:`ProcessorFactory`, called once per held
shard to make a :class:`Processor`. Methods may be plain functions (run in a worker thread) or
coroutines (run on the event loop; they must not block it); which one is decided once, when
the object is made, not at every call.

Optional capabilities are Protocols of their own: a processor may also be :class:`Flushable`;
a factory may also be :class:`Bindable`, :class:`Startable` and :class:`Closable`. Defining the
method is all it takes; the daemon checks the shapes once, when it creates the object
(`loghubd.plugins.loaded`), and a wrong one stops start-up with an error naming the
processor.
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable
from weakref import WeakKeyDictionary

from loghubd.models import Batch
from loghubd.protocol.signing import Credentials

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from loghubd.config import SourceSpec


class StopSignal(Protocol):
    """Set once, when the shard begins to stop (`Tracker.stopping`)."""

    def is_set(self) -> bool:
        """Whether the shard is stopping; may be asked from any thread."""

    async def wait(self) -> None:
        """Return once the shard is stopping; on the event loop only."""


class Tracker(Protocol):
    """The checkpoint handle a processor gets (the SDK's ILogHubCheckPointTracker shape)."""

    @property
    def stopping(self) -> StopSignal:
        """Set when the shard begins to stop: the daemon's shutdown, the shard given to another
        consumer, or its ownership lost. A processor that retries inside `process` (a sink
        that is down) stops retrying then and raises `BatchInterrupted`; a batch that is
        going well should be finished (an interrupted one is read again by the next owner)."""

    def save_checkpoint(self, persist: bool = True) -> None:
        """Mark the current batch done. ``persist=True`` commits to the server now; ``False``
        lets the periodic commit do it within ``checkpoint_interval``."""

    def get_checkpoint(self) -> str:
        """The position that would be committed now (the lowest one not yet finished)."""

    def defer(self) -> Ack:
        """A handle to finish the current batch later (`ack.done()`, from any thread): for
        processors that buffer batches and write them afterwards. Until then the checkpoint
        cannot pass this batch."""

    def note_problem(self, reason: str) -> None:
        """Say why the batch in hand is not done yet while the processor retries it itself
        (its sink down, a 5xx answer), from any thread; "" once it goes well again. The
        daemon shows it as it shows a batch failing under its own retries: `/status`
        (`processor_error`, the shard not caught up), `/readyz` once no batch has finished
        for 60 s, the console. It is cleared when the batch is finished."""


class Ack(Protocol):
    def done(self, persist: bool = False) -> None:
        """The batch is safely written. `persist=True` asks for a commit now."""


class BatchRejected(Exception):
    """Raise it (or a subclass) from `process` when trying the same batch again cannot help: a
    sink that refused the data itself (HTTP 400, a value its column cannot hold). The failure
    policy applies at once, without the `max_attempts` retries: `dead_letter` sets the batch
    aside, `stop` stops the shard, and `retry` (the default) keeps retrying with backoff, as
    it says. Any other exception is retried `max_attempts` times first."""


class BatchInterrupted(Exception):
    """Raise it from `process` to give up on the batch because `tracker.stopping` is set (a
    sink that was failing, and is being retried, when the shard began to stop). The batch is
    neither done nor failed: no retry, no failure policy, the checkpoint stays before it and
    the next owner reads it again. Raised while the shard is not stopping, it counts as an
    ordinary failure."""


class SinkUnreachable(ConnectionError):
    """Raise it from `ProcessorSpec.create` when the sink cannot be reached at start (refused,
    timed out, a name that does not resolve), as opposed to options it refuses (ValueError):
    the configuration may be right and a later start succeed. `loghubd run` exits 4 (systemd
    restarts the unit; 2, a refused configuration, it does not) and `check-config` exits 4,
    each naming the key and the reason given here ("processor.<name>.<key>: ...")."""


@runtime_checkable
class Processor(Protocol):
    """One instance per shard."""

    def initialize(self, shard: int) -> Awaitable[None] | None:
        """Called once before the first batch of this shard. Raising retries the start with
        a new processor, after ``shutdown`` of this one (to release what it opened before
        failing); ``shutdown`` is called too when a stop cuts a waiting start short."""

    def process(self, batch: Batch, tracker: Tracker) -> str | Awaitable[str | None] | None:
        """Handle one batch; call ``tracker.save_checkpoint`` when it is safely done.

        The batch's logs can be read as dicts (``batch.logs()``), JSON lines
        (``batch.jsonl_chunks()``) or a pyarrow RecordBatch (``batch.arrow()``):
        docs/batch-views.md gives their layouts and their cost per log.

        Returning a cursor rolls the shard back: fetching restarts from that cursor. Raising
        retries the same batch with backoff (it is never skipped silently)."""

    def shutdown(self, tracker: Tracker) -> Awaitable[None] | None:
        """Called once when the shard is let go (rebalance or shutdown), after the last batch."""


@runtime_checkable
class Flushable(Protocol):
    """Optional, on a processor: ``flush()``, sync or async, is called before this shard's
    checkpoint is committed; a processor that writes files makes them durable there (fsync)."""

    def flush(self) -> Awaitable[None] | None: ...


@runtime_checkable
class Committed(Protocol):
    """Optional, on a processor: ``committed(cursor)``, sync or async, is called after this
    consumer committed the shard's checkpoint at ``cursor`` (the server holds it: the daemon
    will not deliver anything before it again). For housekeeping that must wait for the
    checkpoint itself rather than for the processor's acknowledgement, such as deleting
    write-ahead records of data now behind it. Keep it short, as ``flush``: it runs in the
    commit path, and this shard's next commit waits for it. An exception is logged as a
    warning and changes nothing else; the next commit calls it again."""

    def committed(self, cursor: str) -> Awaitable[None] | None: ...


@runtime_checkable
class Redeliverable(Protocol):
    """Optional, on a processor: ``redelivery()``, sync or async, is asked about once a second
    while this shard waits for its next batch. Returning a cursor rolls the shard back there,
    as ``process`` returning one does (the batches from that cursor on are fetched and handed
    to ``process`` again); None changes nothing. For a processor that holds batches past
    ``process`` (a buffer written later, by a timer) and finds that one of them must go through
    ``process`` again, e.g. so that its failure meets the failure policy: on a shard that
    receives nothing new, no ``process`` call would carry the request. Keep it cheap. An
    exception, or an answer that is neither a cursor nor None, is logged and changes nothing;
    it is asked again a second later."""

    def redelivery(self) -> str | Awaitable[str | None] | None: ...


class ProcessorFactory(Protocol):
    """Per daemon: makes one processor per shard. May also be :class:`Bindable`,
    :class:`Startable` and :class:`Closable`."""

    def __call__(self, shard: int) -> Processor: ...


@runtime_checkable
class Bindable(Protocol):
    """Optional, on a factory: ``bind(context)``, a plain function, called once with a
    :class:`ProcessorContext` before ``start()``."""

    def bind(self, context: ProcessorContext) -> None: ...


@runtime_checkable
class Startable(Protocol):
    """Optional, on a factory: ``start()``, sync or async, before the first shard; the daemon
    is not ready until it returns."""

    def start(self) -> Awaitable[None] | None: ...


@runtime_checkable
class Closable(Protocol):
    """Optional, on a factory: ``close()``, sync or async, once at shutdown (after every
    shard's processor has shut down); also when the daemon is stopped during (or right after)
    ``start()``, so it should close only what was opened."""

    def close(self) -> Awaitable[None] | None: ...


def _new_registry() -> CollectorRegistry:
    """A registry of its own (nobody serves it): prometheus_client is imported only when a
    context is made, so `import loghubd` (every CLI command, plugin loading) does not pay it."""
    from prometheus_client import CollectorRegistry

    return CollectorRegistry(auto_describe=True)


_Instruments = TypeVar("_Instruments")
# Per registry, the instrument sets made on it (by their class): see ProcessorContext.instruments.
_made: WeakKeyDictionary[CollectorRegistry, dict[Callable[..., Any], Any]] = WeakKeyDictionary()


@dataclass(frozen=True, slots=True)
class ProcessorContext:
    """Where the daemon consumes from, for factories that need to read the source themselves
    (e.g. to re-read exact ranges after a crash). Handed to the optional ``factory.bind``.

    ``metrics_registry``: where a processor registers its own Prometheus instruments (names
    ``loghubd_<processor>_...``, units in the name, ``_total`` for counters), best through
    ``instruments``. The daemon's ``/metrics`` serves them beside its own, each series with
    this source's ``source`` label; outside a daemon (tests, the dead-letter replay) it is a
    registry nobody serves.

    ``replay``: True when the factory is bound by ``loghubd dead-letters replay``: every batch
    is a dead letter, a range the shard's checkpoint has already passed, handed over once
    more. A sink that fences writes on its own stored position (``loghubd-postgres``) lets
    such a batch through only if it recorded the range as set aside."""

    endpoint: str
    project: str
    logstore: str
    credentials: Callable[[], Credentials]  # current credentials (they may be rotated)
    group: str
    consumer: str
    auth_version: str = "v1"
    region: str = ""
    metrics_registry: CollectorRegistry = field(default_factory=_new_registry)
    replay: bool = False

    def instruments(self, kind: Callable[[CollectorRegistry], _Instruments]) -> _Instruments:
        """``kind(metrics_registry)``, made once per registry and then shared: a registry
        refuses a second series of the same name, and a second factory or engine bound to
        the same source (a restarted one, a test's) counts into the same totals."""
        made = _made.setdefault(self.metrics_registry, {})
        if kind not in made:
            made[kind] = kind(self.metrics_registry)
        instruments: _Instruments = made[kind]
        return instruments

    @classmethod
    def of_source(
        cls,
        spec: SourceSpec,
        consumer: str,
        credentials: Callable[[], Credentials],
        metrics_registry: CollectorRegistry | None = None,
        *,
        replay: bool = False,
    ) -> ProcessorContext:
        """The context of a configured source, as `loghubd run` (and, with `replay`, the
        dead-letter replay) hands it to `factory.bind`."""
        s = spec.source
        return cls(
            endpoint=s.endpoint,
            project=s.project,
            logstore=s.logstore,
            credentials=credentials,
            group=spec.consumer.group,
            consumer=consumer,
            auth_version=s.auth_version,
            region=s.region,
            metrics_registry=metrics_registry or _new_registry(),
            replay=replay,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class CliCommand:
    """A `loghubd <name>` subcommand a plugin adds (the `loghubd_cli_commands` hook).

    The core makes the subparser with `help` and `description`, lets `arguments` add the
    command's own arguments, and calls `run(args)` for its exit code (0 done, 1 failed,
    2 usage or configuration error). `logs_are_output`: a long-running command whose log lines
    go to standard output, like `loghubd run` (otherwise they go to standard error). Import
    heavy dependencies inside `run`, so `loghubd --help` stays fast."""

    name: str
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    description: str = ""
    logs_are_output: bool = False


@dataclass(frozen=True, slots=True)
class ProcessorSpec:
    name: str
    # options ([processor.<name>] table) → factory. Raise ValueError("<key>: why") on bad options.
    create: Callable[[Mapping[str, Any]], ProcessorFactory]
    description: str = ""
    # The keys of [processor.<name>] → what each means (shown by `loghubd plugins`).
    options: Mapping[str, str] = field(default_factory=dict)
