"""loghubd.testing's batch builder and recording tracker, for plugin authors' unit tests."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loghubd.protocol import cursor
from loghubd.testing import RecordingTracker, make_batch

fields = st.dictionaries(
    st.text(st.characters(categories=["L", "N"]), min_size=1, max_size=8).filter(
        lambda k: not k.startswith("__")
    ),
    st.text(max_size=20),
    max_size=4,
)


@given(logs=st.lists(fields, max_size=30), group_size=st.integers(1, 7))
def test_logs_come_back_as_the_daemon_shows_them(
    logs: list[dict[str, str]], group_size: int
) -> None:
    batch = make_batch(
        [{**log, "__time__": 1700000000 + i} for i, log in enumerate(logs)],
        shard=1,
        start=5,
        group_size=group_size,
        topic="t",
        source="s",
        tags={"host": "h"},
    )
    got = list(batch.logs())
    assert batch.log_count == len(logs)
    assert batch.group_count == -(-len(logs) // group_size)
    assert got == [
        {
            "__time__": 1700000000 + i,
            "__topic__": "t",
            "__source__": "s",
            "__tag__:host": "h",
            **log,
        }
        for i, log in enumerate(logs)
    ]
    assert cursor.to_seq(1, batch.cursor) == 5
    assert cursor.to_seq(1, batch.next_cursor) == 5 + batch.group_count


@pytest.mark.parametrize("key", ["__topic__", "__tag__:host"])
def test_group_fields_go_through_arguments(key: str) -> None:
    with pytest.raises(ValueError, match=key):
        make_batch([{key: "x"}])


def test_recording_tracker_notes_saves_and_deferred_acks() -> None:
    tracker = RecordingTracker(checkpoint="abc")
    assert not tracker.finished
    first, second = tracker.defer(), tracker.defer()
    second.done(persist=True)
    assert not tracker.finished
    first.done()
    assert tracker.finished and tracker.acked == [(1, True), (0, False)]
    tracker.save_checkpoint(persist=False)
    assert tracker.saved == [False] and tracker.get_checkpoint() == "abc"


def test_free_ports_are_consecutive_and_all_free() -> None:
    import socket

    from loghubd.testing import free_ports

    base = free_ports(3)
    held = []
    try:
        for port in range(base, base + 3):  # each of them binds now
            s = socket.socket()
            held.append(s)
            s.bind(("127.0.0.1", port))
    finally:
        for s in held:
            s.close()


@pytest.mark.parametrize("count", [1, 3])
def test_reserved_ports_are_nobody_elses_until_their_child_listens_on_them(count: int) -> None:
    """`count` consecutive ports (a `--workers` run's ops listeners are port + i)."""
    import socket

    from loghubd.testing import PortReservation

    reservation = PortReservation(count)
    ports = range(reservation.port, reservation.port + count)
    try:
        handed = set()
        for _ in range(500):  # what free_port (and anything binding port 0) can get
            with socket.socket() as other:
                other.bind(("127.0.0.1", 0))
                handed.add(other.getsockname()[1])
        assert not handed & set(ports)
        for port in ports:
            with socket.socket() as plain, pytest.raises(OSError, match="in use"):
                plain.bind(("127.0.0.1", port))
            # the child: SO_REUSEADDR, as aiohttp's reuse_address (loghubd run's ops listener)
            with socket.socket() as child:
                child.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                child.bind(("127.0.0.1", port))
                child.listen()
                with socket.create_connection(("127.0.0.1", port), timeout=5):
                    pass
    finally:
        reservation.release()
    for port in ports:
        with socket.socket() as after:
            after.bind(("127.0.0.1", port))  # released: anyone's again


def test_an_application_served_on_loopback_answers_on_the_port_returned() -> None:
    import asyncio
    import urllib.request

    from aiohttp import web

    from loghubd.testing import serve_on_loopback

    def fetch(url: str) -> bytes:  # in a thread: the server answers on the test's loop
        with urllib.request.urlopen(url, timeout=5) as answer:
            body: bytes = answer.read()
            return body

    async def main() -> bytes:
        async def hello(_request: web.Request) -> web.Response:
            return web.Response(text="hello")

        app = web.Application()
        app.router.add_get("/", hello)
        runner = web.AppRunner(app)
        await runner.setup()
        try:
            port = await serve_on_loopback(runner)
            assert port > 0
            return await asyncio.to_thread(fetch, f"http://127.0.0.1:{port}/")
        finally:
            await runner.cleanup()

    assert asyncio.run(main()) == b"hello"
