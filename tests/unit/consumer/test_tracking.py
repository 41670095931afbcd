"""ShardTracker: deferred acks finish exactly their batch, from any thread; `stopping` tells
processors the shard is stopping."""

from __future__ import annotations

import threading

import anyio

from loghubd.consumer.tracking import ShardTracker, StopFlag


def fetch(tracker: ShardTracker, start: str, end: str) -> None:
    tracker.begin(tracker.fetched(start, end))


def test_deferred_ack_finishes_only_its_batch() -> None:
    t = ShardTracker("c0")
    fetch(t, "c0", "c1")
    first = t.defer()
    fetch(t, "c1", "c2")
    second = t.defer()
    fetch(t, "c2", "c3")  # processed but never acked
    assert t.committable() == "c0"
    second.done()
    assert t.committable() == "c0"  # the first batch is still unwritten
    first.done()
    assert t.committable() == "c2"  # both written; the third is not
    assert not t.take_commit_request()


def test_ack_with_persist_requests_a_commit() -> None:
    t = ShardTracker("c0")
    fetch(t, "c0", "c1")
    t.defer().done(persist=True)
    assert t.committable() == "c1"
    assert t.take_commit_request()
    assert not t.take_commit_request()


def test_acks_from_many_threads_while_fetching() -> None:
    t = ShardTracker("0")
    acks = []
    for i in range(2000):
        fetch(t, str(i), str(i + 1))
        acks.append(t.defer())
    threads = [
        threading.Thread(target=lambda part=acks[k::4]: [a.done() for a in part]) for k in range(4)
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert t.committable() == "2000"


def test_ack_after_rollback_is_ignored() -> None:
    t = ShardTracker("c0")
    fetch(t, "c0", "c1")
    ack = t.defer()
    t.rollback("c0")  # the processor asked to re-read: the batch will be fetched again
    ack.done()
    assert t.committable() == "c0"


def test_stopping_wakes_every_waiter_and_is_seen_from_other_threads() -> None:
    flag = StopFlag()  # made outside any event loop, as a unit test's tracker is
    tracker = ShardTracker("c0", stopping=flag)
    assert tracker.stopping is flag and not flag.is_set()
    woken: list[int] = []
    seen_in_thread: list[bool] = []

    async def waiter(n: int) -> None:
        await flag.wait()
        woken.append(n)

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for n in range(3):
                tg.start_soon(waiter, n)
            await anyio.sleep(0.01)
            assert not woken
            flag.set()
        seen_in_thread.append(await anyio.to_thread.run_sync(lambda: tracker.stopping.is_set()))
        await flag.wait()  # already set: returns at once

    anyio.run(main)
    assert sorted(woken) == [0, 1, 2] and seen_in_thread == [True]
    assert not ShardTracker("c0").stopping.is_set()  # each tracker has its own by default
