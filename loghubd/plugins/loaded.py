"""A processor factory and its processors as the daemon calls them: typed once, at creation.

`load_factory` checks a factory's shape when the daemon creates it (callable; `bind`,
`start`, `close` callable when present, `bind` a plain function) and `LoadedFactory.processor`
checks each processor it makes (the `Processor` methods; `flush` and `committed` when
present). A wrong shape is a `ShapeError` naming the processor. Whether each method is a
coroutine function (awaited on the event loop) or a plain one (run in a worker thread, so a
blocking processor never delays the heartbeat) is decided there too, once: the consumer then
only awaits `AsyncCall`s and never looks at a plugin object's attributes itself.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio

from loghubd.plugins.api import (
    Bindable,
    Closable,
    Committed,
    Flushable,
    Processor,
    ProcessorContext,
    ProcessorFactory,
    Redeliverable,
    Startable,
)

AsyncCall = Callable[..., Awaitable[Any]]


class ShapeError(TypeError):
    """A plugin's factory or processor does not have the shape `loghubd.plugins.api` says."""


class ProcessorCrashed(RuntimeError):
    """A plain (threaded) plugin method raised what is not an `Exception`: SystemExit,
    KeyboardInterrupt, a CancelledError of its own. Raised in the worker thread, it would end
    the daemon (or look like an operator's Ctrl-C, or a cancellation): it is a failure of that
    call, and the retry policy applies to it like to any other."""


def as_async(fn: Callable[..., Any], what: str, *, abandon_on_cancel: bool = False) -> AsyncCall:
    """`fn` as a coroutine function: itself when it is one, else a call in a worker thread.
    `abandon_on_cancel`: a cancelled caller does not wait for the thread (process, shutdown)."""
    if inspect.iscoroutinefunction(fn):
        return fn

    def call(*args: Any) -> Any:
        try:
            return fn(*args)
        except Exception:
            raise
        except BaseException as exc:  # only the plugin's own code runs in this thread
            raise ProcessorCrashed(f"{what} raised {exc!r}") from exc

    async def in_thread(*args: Any) -> Any:
        result = await anyio.to_thread.run_sync(
            lambda: call(*args), abandon_on_cancel=abandon_on_cancel
        )
        if inspect.isawaitable(result):
            if inspect.iscoroutine(result):
                result.close()
            raise ShapeError(
                f"{what} is a plain function that returned an awaitable: declare it `async def`"
            )
        return result

    return in_thread


@dataclass(frozen=True, slots=True)
class LoadedProcessor:
    """One shard's processor: its methods as `AsyncCall`s; `flush` None when it has none."""

    name: str
    initialize: AsyncCall
    process: AsyncCall
    shutdown: AsyncCall
    flush: AsyncCall | None
    # `flush` for a shard abandoned at the end of the shutdown grace: a cancelled caller does
    # not wait for its thread (the processor may be stuck in the very call flush waits on).
    flush_abandoning: AsyncCall | None = None
    # `committed(cursor)` after each successful commit, None when it has none.
    committed: AsyncCall | None = None
    # `redelivery()` while the shard waits for data, None when it has none.
    redelivery: AsyncCall | None = None


@dataclass(frozen=True, slots=True)
class LoadedFactory:
    """A processor's factory with its optional capabilities resolved (None: not provided)."""

    name: str
    make: ProcessorFactory
    bind: Callable[[ProcessorContext], None] | None
    start: AsyncCall | None
    close: AsyncCall | None

    def processor(self, shard: int) -> LoadedProcessor:
        """A new processor for `shard`, its shape checked (`ShapeError` names the plugin)."""
        return load_processor(self.name, self.make(shard))


def _method(owner: str, name: str, value: object) -> Callable[..., Any]:
    if not callable(value):
        raise ShapeError(f"{owner}: `{name}` is not callable (got {type(value).__name__})")
    return value


def load_factory(name: str, factory: object) -> LoadedFactory:
    """`factory` (what `ProcessorSpec.create` returned) checked and resolved once."""
    owner = f"processor {name!r}: factory {type(factory).__name__}"
    if not callable(factory):
        raise ShapeError(f"{owner} is not callable (it must make one processor per shard)")
    bind = start = close = None
    if isinstance(factory, Bindable):
        bind = _method(owner, "bind", factory.bind)
        if inspect.iscoroutinefunction(bind):
            raise ShapeError(f"{owner}: `bind` must be a plain function, not `async def`")
    if isinstance(factory, Startable):
        start = as_async(_method(owner, "start", factory.start), f"{owner}: start")
    if isinstance(factory, Closable):
        close = as_async(_method(owner, "close", factory.close), f"{owner}: close")
    return LoadedFactory(name, factory, bind, start, close)


def load_processor(name: str, processor: object) -> LoadedProcessor:
    """One processor checked and resolved once, when its shard starts."""
    owner = f"processor {name!r}: {type(processor).__name__}"
    if not isinstance(processor, Processor):
        raise ShapeError(
            f"{owner} is not a processor: it needs initialize(shard), process(batch, tracker) "
            "and shutdown(tracker) (see loghubd.Processor)"
        )
    flush = flush_abandoning = None
    if isinstance(processor, Flushable):
        method = _method(owner, "flush", processor.flush)
        flush = as_async(method, f"{owner}: flush")
        flush_abandoning = as_async(method, f"{owner}: flush", abandon_on_cancel=True)
    return LoadedProcessor(
        name,
        initialize=as_async(
            _method(owner, "initialize", processor.initialize), f"{owner}: initialize"
        ),
        process=as_async(
            _method(owner, "process", processor.process),
            f"{owner}: process",
            abandon_on_cancel=True,
        ),
        shutdown=as_async(
            _method(owner, "shutdown", processor.shutdown),
            f"{owner}: shutdown",
            abandon_on_cancel=True,
        ),
        flush=flush,
        flush_abandoning=flush_abandoning,
        committed=_hook(owner, processor, Committed, "committed"),
        redelivery=_hook(owner, processor, Redeliverable, "redelivery"),
    )


def _hook(owner: str, processor: object, capability: type, name: str) -> AsyncCall | None:
    """The optional method `name` of `processor` if it has `capability` (None if not); a
    cancelled caller does not wait for its thread."""
    if not isinstance(processor, capability):
        return None
    method = _method(owner, name, getattr(processor, name))
    return as_async(method, f"{owner}: {name}", abandon_on_cancel=True)
