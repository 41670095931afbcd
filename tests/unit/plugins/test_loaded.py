"""The typed processor seam: shapes checked once at creation, sync or async decided once."""

from __future__ import annotations

import threading
from typing import Any

import anyio
import pytest

from loghubd import ProcessorContext
from loghubd.plugins.loaded import ShapeError, load_factory, load_processor
from loghubd.plugins.manager import PluginError, Plugins


class SyncProcessor:
    def __init__(self) -> None:
        self.threads: list[str] = []

    def initialize(self, shard: int) -> None:
        self.threads.append(threading.current_thread().name)

    def process(self, batch: Any, tracker: Any) -> str:
        self.threads.append(threading.current_thread().name)
        return "rollback-cursor"

    def shutdown(self, tracker: Any) -> None:
        pass


class AsyncProcessor:
    def __init__(self) -> None:
        self.threads: list[str] = []

    async def initialize(self, shard: int) -> None:
        self.threads.append(threading.current_thread().name)

    async def process(self, batch: Any, tracker: Any) -> None:
        self.threads.append(threading.current_thread().name)

    async def shutdown(self, tracker: Any) -> None:
        pass

    async def flush(self) -> None:
        self.threads.append("flushed")


def test_sync_methods_run_in_a_worker_thread_async_ones_on_the_loop() -> None:
    sync, asyn = SyncProcessor(), AsyncProcessor()
    loaded_sync, loaded_async = load_processor("s", sync), load_processor("a", asyn)

    async def main() -> tuple[Any, Any]:
        loop_thread = threading.current_thread().name
        await loaded_sync.initialize(0)
        got = await loaded_sync.process(None, None)
        await loaded_async.initialize(0)
        await loaded_async.process(None, None)
        assert loaded_async.flush is not None
        await loaded_async.flush()
        return loop_thread, got

    loop_thread, got = anyio.run(main)
    assert got == "rollback-cursor"
    assert all(name != loop_thread for name in sync.threads)
    assert asyn.threads == [loop_thread, loop_thread, "flushed"]
    assert loaded_sync.flush is None  # no flush(): nothing to call before a commit
    assert loaded_sync.committed is None and loaded_async.committed is None
    assert loaded_sync.redelivery is None and loaded_async.redelivery is None


class Housekeeping(SyncProcessor):
    def committed(self, cursor: str) -> None:
        self.threads.append(f"committed {cursor} in {threading.current_thread().name}")


def test_a_plain_committed_hook_runs_in_a_worker_thread() -> None:
    processor = Housekeeping()
    loaded = load_processor("h", processor)

    async def main() -> str:
        assert loaded.committed is not None
        await loaded.committed("MTA=")
        return threading.current_thread().name

    loop_thread = anyio.run(main)
    [line] = processor.threads
    assert line.startswith("committed MTA= in ") and not line.endswith(f" {loop_thread}")


class AsksAgain(SyncProcessor):
    def redelivery(self) -> str | None:
        self.threads.append(threading.current_thread().name)
        return "MTA=" if len(self.threads) > 1 else None


class AsksAgainAsync(AsyncProcessor):
    async def redelivery(self) -> str | None:
        self.threads.append(threading.current_thread().name)
        return "MTA="


def test_redelivery_is_resolved_plain_in_a_worker_thread_async_on_the_loop() -> None:
    plain, asyn = AsksAgain(), AsksAgainAsync()
    loaded_plain, loaded_async = load_processor("p", plain), load_processor("a", asyn)

    async def main() -> tuple[str, list[Any]]:
        assert loaded_plain.redelivery is not None and loaded_async.redelivery is not None
        got = [await loaded_plain.redelivery(), await loaded_plain.redelivery()]
        got.append(await loaded_async.redelivery())
        return threading.current_thread().name, got

    loop_thread, got = anyio.run(main)
    assert got == [None, "MTA=", "MTA="]
    assert all(name != loop_thread for name in plain.threads)
    assert asyn.threads == [loop_thread]


class NoProcess:
    def initialize(self, shard: int) -> None:
        pass

    def shutdown(self, tracker: Any) -> None:
        pass


class FlushNotCallable(SyncProcessor):
    flush = 3


class CommittedNotCallable(SyncProcessor):
    committed = "yes"


class RedeliveryNotCallable(SyncProcessor):
    redelivery = 1


class SyncReturningCoroutine(SyncProcessor):
    def process(self, batch: Any, tracker: Any) -> Any:
        async def later() -> None:
            pass

        return later()


@pytest.mark.parametrize(
    ("processor", "message"),
    [
        (NoProcess(), "'demo': NoProcess is not a processor: it needs initialize"),
        (FlushNotCallable(), "'demo': FlushNotCallable: `flush` is not callable"),
        (CommittedNotCallable(), "'demo': CommittedNotCallable: `committed` is not callable"),
        (
            RedeliveryNotCallable(),
            "'demo': RedeliveryNotCallable: `redelivery` is not callable",
        ),
        (object(), "'demo': object is not a processor"),
    ],
)
def test_a_processor_of_the_wrong_shape_is_refused_naming_the_plugin(
    processor: object, message: str
) -> None:
    with pytest.raises(ShapeError, match=message):
        load_processor("demo", processor)


def test_a_plain_method_returning_an_awaitable_is_a_clear_error() -> None:
    loaded = load_processor("demo", SyncReturningCoroutine())

    async def main() -> None:
        await loaded.process(None, None)

    with pytest.raises(ShapeError, match=r"demo.*process is a plain function that returned"):
        anyio.run(main)


class FullFactory:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def bind(self, context: ProcessorContext) -> None:
        self.calls.append(f"bind {context.logstore}")

    async def start(self) -> None:
        self.calls.append("start")

    def close(self) -> None:
        self.calls.append("close")

    def __call__(self, shard: int) -> SyncProcessor:
        return SyncProcessor()


class AsyncBind:
    async def bind(self, context: ProcessorContext) -> None:
        pass

    def __call__(self, shard: int) -> SyncProcessor:
        return SyncProcessor()


def test_factory_capabilities_are_resolved_once() -> None:
    factory = FullFactory()
    loaded = load_factory("demo", factory)
    assert loaded.bind is not None and loaded.start is not None and loaded.close is not None
    context = ProcessorContext("e", "p", "ls", lambda: None, "g", "c")  # type: ignore[arg-type]
    loaded.bind(context)
    anyio.run(loaded.start)
    anyio.run(loaded.close)
    assert factory.calls == ["bind ls", "start", "close"]
    assert isinstance(loaded.processor(3), object)

    bare = load_factory("bare", lambda shard: SyncProcessor())
    assert (bare.bind, bare.start, bare.close) == (None, None, None)


@pytest.mark.parametrize(
    ("factory", "message"),
    [
        (object(), "'demo': factory object is not callable"),
        (AsyncBind(), "'demo': factory AsyncBind: `bind` must be a plain function"),
    ],
)
def test_a_factory_of_the_wrong_shape_is_refused(factory: object, message: str) -> None:
    with pytest.raises(ShapeError, match=message):
        load_factory("demo", factory)


def test_plugins_create_turns_a_wrong_factory_into_a_plugin_error() -> None:
    plugins = Plugins(load_entry_points=False)
    assert plugins.create("null", {}).start is None
    plugins._processors["broken"] = type(plugins.processor("null"))(  # a spec whose factory
        "broken",
        lambda options: object(),  # is not callable
    )
    with pytest.raises(PluginError, match="processor 'broken': factory object is not callable"):
        plugins.create("broken", {})
