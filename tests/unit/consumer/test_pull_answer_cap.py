"""A PullLogs answer larger than the pull takes (`fetcher.MIN_ANSWER_CAP`, or 4 x the byte
budget) is refused before it is read in full or decoded, and asked for again with half as
many log groups. Against an endpoint in the test's own loop that is not SLS (a man in the
middle, a broken proxy): before, a 1.5 GB answer took a daemon to 3.2 GB of RSS."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from itertools import pairwise

import aiohttp
import anyio
import pytest
from aiohttp import web

from loghubd.consumer import fetcher
from loghubd.consumer.budget import ByteBudget
from loghubd.ops.metrics import Metrics
from loghubd.protocol.signing import Credentials
from loghubd.sls import SlsClient
from loghubd.sls.errors import AnswerTooLarge
from loghubd.testing import serve_on_loopback

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
MiB = 1024 * 1024


def answer_headers(groups: int, raw_size: int) -> dict[str, str]:
    return {
        "x-log-count": str(groups),
        "x-log-bodyrawsize": str(raw_size),
        "x-log-cursor": "MTAwMA==",
        "x-log-compresstype": "lz4",
    }


async def with_client(handler: Handler, use: Callable[[SlsClient], Awaitable[object]]) -> object:
    app = web.Application()
    app.router.add_get("/logstores/ls/shards/0", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = await serve_on_loopback(runner)
    try:
        async with aiohttp.ClientSession() as session:
            client = SlsClient(
                session, f"http://127.0.0.1:{port}", "p", lambda: Credentials("", "")
            )
            return await use(client)
    finally:
        await runner.cleanup()


async def lying_raw_size(request: web.Request) -> web.Response:
    # 1 KB on the wire that claims to decode to 2 GiB: refused before any decoding
    return web.Response(body=b"\0" * 1024, headers=answer_headers(1, 2 * 1024 * MiB))


async def long_body(request: web.Request) -> web.Response:
    return web.Response(body=b"\0" * (2 * MiB), headers=answer_headers(1, 1024))


async def long_chunked_body(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers=answer_headers(1, 1024))
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    for _ in range(64):  # 4 MiB in all, with no Content-Length
        await resp.write(b"\0" * (64 * 1024))
    await resp.write_eof()
    return resp


@pytest.mark.parametrize(
    ("handler", "said"),
    [
        (lying_raw_size, "decodes to 2147483648 bytes"),
        (long_body, "answer of 2097152 bytes"),
        (long_chunked_body, "more than 1048576 bytes (chunked)"),
    ],
)
def test_an_answer_past_the_cap_is_refused_unread(handler: Handler, said: str) -> None:
    async def pull(client: SlsClient) -> object:
        with pytest.raises(AnswerTooLarge) as info:
            await client.pull("ls", 0, "MA==", 10, max_bytes=MiB)
        return str(info.value)

    message = anyio.run(with_client, handler, pull)
    assert said in str(message), message


def test_fewer_log_groups_are_asked_for_until_the_answer_fits() -> None:
    asked: list[int] = []

    async def big_unless_few(request: web.Request) -> web.Response:
        count = int(request.query["count"])
        asked.append(count)
        if count > 1:
            return web.Response(body=b"\0", headers=answer_headers(count, 2 * 1024 * MiB))
        return web.Response(body=b"", headers=answer_headers(0, 0))

    async def pull(client: SlsClient) -> object:
        budget = ByteBudget(64 * MiB, Metrics())
        settings = fetcher.FetchSettings(logstore="ls", max_log_groups=100, fetch_interval=0.1)
        grant, pulled, kept = await fetcher._pull(client, settings, budget, 0, "MA==", None, 100)
        assert pulled.count == 0 and grant.groups == asked[-1] == kept
        budget.cancel(grant)
        assert budget.used == 0  # every refused pull gave its room back
        # the shard's next pull asks for what fitted at once: no large answer again
        before = len(asked)
        grant, _pulled, _kept = await fetcher._pull(client, settings, budget, 0, "MA==", None, kept)
        budget.cancel(grant)
        assert asked[before:] == [1], asked
        del asked[before:]  # (the halving is checked below, on the first pull's requests)
        return None

    anyio.run(with_client, big_unless_few, pull)
    assert asked[-1] == 1 and all(b == a // 2 for a, b in pairwise(asked))
    assert len(asked) >= 3, asked  # the budget's first grant, halved down to one


def test_a_single_log_group_past_the_cap_is_an_error() -> None:
    async def pull(client: SlsClient) -> object:
        budget = ByteBudget(64 * MiB, Metrics())
        settings = fetcher.FetchSettings(logstore="ls", max_log_groups=8, fetch_interval=0.1)
        with pytest.raises(AnswerTooLarge):
            await fetcher._pull(client, settings, budget, 0, "MA==", None, 8)
        assert budget.used == 0
        return None

    anyio.run(with_client, lying_raw_size, pull)
