"""What a processor plugin implements: the seams between the daemon and user code.

A plugin registers :class:`ProcessorSpec` values through the `loghubd_register_processors`
hook. At start-up the daemon calls ``spec.create(options)`` once, with the processor's own
``[processor.<name>]`` table; the result is a :class:`ProcessorFactory`, called once per held
shard to make a :class:`Processor`. Methods may be plain functions (run in a worker thread) or
coroutines (run on the event loop; they must not block it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from loghubd.models import Batch
from loghubd.protocol.signing import Credentials


class Tracker(Protocol):
    """The checkpoint handle a processor gets (the SDK's ILogHubCheckPointTracker shape)."""

    def save_checkpoint(self, persist: bool = True) -> None:
        """Mark the current batch done. ``persist=True`` commits to the server now; ``False``
        lets the checkpoint flusher commit it within ``checkpoint_interval``."""

    def get_checkpoint(self) -> str:
        """The position that would be committed now (the lowest one not yet finished)."""

    def defer(self) -> Ack:
        """A handle to finish the current batch later (`ack.done()`, from any thread): for
        processors that buffer batches and write them afterwards. Until then the checkpoint
        cannot pass this batch."""


class Ack(Protocol):
    def done(self, persist: bool = False) -> None:
        """The batch is safely written. `persist=True` asks for a commit now."""


@runtime_checkable
class Processor(Protocol):
    """One instance per shard."""

    def initialize(self, shard: int) -> Awaitable[None] | None:
        """Called once before the first batch of this shard."""

    def process(self, batch: Batch, tracker: Tracker) -> str | Awaitable[str | None] | None:
        """Handle one batch; call ``tracker.save_checkpoint`` when it is safely done.

        The batch's logs can be read as dicts (``batch.logs()``), JSON lines
        (``batch.jsonl_chunks()``) or a pyarrow RecordBatch (``batch.arrow()``):
        docs/batch-views.md gives their layouts and their cost per log.

        Returning a cursor rolls the shard back: fetching restarts from that cursor. Raising
        retries the same batch with backoff (it is never skipped silently)."""

    def shutdown(self, tracker: Tracker) -> Awaitable[None] | None:
        """Called once when the shard is let go (rebalance or shutdown), after the last batch."""

    # Optional: ``flush()``, sync or async, is called before this shard's checkpoint is
    # committed; a processor that writes files makes them durable there (fsync).


class ProcessorFactory(Protocol):
    """Per daemon: makes one processor per shard. May also define ``bind(context)`` (a plain
    function, called once with a :class:`ProcessorContext` before ``start()``), ``start()``
    (before the first shard; the daemon is not ready until it returns) and ``close()`` (at
    shutdown); ``start`` and ``close`` may be sync or async."""

    def __call__(self, shard: int) -> Processor: ...


@dataclass(frozen=True, slots=True)
class ProcessorContext:
    """Where the daemon consumes from, for factories that need to read the source themselves
    (e.g. to re-read exact ranges after a crash). Handed to the optional ``factory.bind``."""

    endpoint: str
    project: str
    logstore: str
    credentials: Callable[[], Credentials]  # current credentials (they may be rotated)
    group: str
    consumer: str
    auth_version: str = "v1"
    region: str = ""


@dataclass(frozen=True, slots=True)
class ProcessorSpec:
    name: str
    # options ([processor.<name>] table) → factory. Raise ValueError("<key>: why") on bad options.
    create: Callable[[Mapping[str, Any]], ProcessorFactory]
    description: str = ""
