"""`loghubd.sls.network.cause`: why a request got no answer, from real failed connections
(in process, loopback only): the phrase names the cause and never dumps aiohttp's reprs."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import aiohttp
import anyio
import anyio.abc
import pytest
from aiohttp import web
from anyio.abc import SocketAttribute

from loghubd.sls import network
from loghubd.testing import serve_on_loopback
from loghubd.testing.process import free_port


async def _fail(url: str) -> BaseException:
    async with aiohttp.ClientSession() as session:
        try:
            async with session.get(url, timeout=aiohttp.ClientTimeout(total=5)) as resp:
                await resp.read()
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            return exc
    raise AssertionError(f"{url} answered")


async def _with_http_server(use: Callable[[int], object]) -> BaseException:
    async def plain(_request: web.Request) -> web.Response:
        return web.Response(text="plain")

    app = web.Application()
    app.router.add_get("/", plain)
    runner = web.AppRunner(app)
    await runner.setup()
    port = await serve_on_loopback(runner)
    try:
        result = await use(port)  # type: ignore[misc]
        assert isinstance(result, BaseException)
        return result
    finally:
        await runner.cleanup()


async def _closing_server(use: Callable[[int], object]) -> BaseException:
    """A listener that accepts and closes at once, answering nothing."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(SocketAttribute.local_port)

    async def close(stream: anyio.abc.SocketStream) -> None:
        await stream.aclose()

    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, close)
        result = await use(port)  # type: ignore[misc]
        tg.cancel_scope.cancel()
    assert isinstance(result, BaseException)
    return result


async def refused() -> BaseException:
    return await _fail(f"http://127.0.0.1:{free_port()}/")


async def https_to_plain_http() -> BaseException:
    return await _with_http_server(lambda port: _fail(f"https://127.0.0.1:{port}/"))


async def unresolvable() -> BaseException:
    return await _fail("http://nosuch.invalid/")


async def closed_at_once() -> BaseException:
    return await _closing_server(lambda port: _fail(f"http://127.0.0.1:{port}/"))


@pytest.mark.parametrize(
    ("failure", "words"),
    [
        (refused, ["127.0.0.1:", "connection refused: nothing listens there"]),
        (https_to_plain_http, ["WRONG_VERSION_NUMBER", "use an http:// endpoint"]),
        (unresolvable, ["the host name nosuch.invalid does not resolve"]),
        # closed or reset, as the kernel's timing has it: either is named as such
        (closed_at_once, ["the connection"]),
    ],
)
def test_the_cause_of_a_real_failure_is_named(
    failure: Callable[[], AsyncIterator[BaseException]], words: list[str]
) -> None:
    exc = anyio.run(failure)  # type: ignore[arg-type]
    said = network.cause(exc)
    for word in words:
        assert word in said, (said, repr(exc))
    assert "ConnectionKey" not in said and "ssl=" not in said, said


@pytest.mark.parametrize(
    ("exc", "said"),
    [
        (None, "no attempt finished"),
        (TimeoutError(), "no answer in time"),
        (ConnectionResetError(104, "Connection reset by peer"), "the connection was reset"),
        (ValueError("odd"), "ValueError: odd"),
    ],
)
def test_the_other_causes(exc: BaseException | None, said: str) -> None:
    assert network.cause(exc) == said


@pytest.mark.parametrize(
    ("failure", "hopeless"),
    [(https_to_plain_http, True), (refused, False), (closed_at_once, False)],
)
def test_only_a_failure_that_cannot_change_ends_a_call_at_once(
    failure: Callable[[], AsyncIterator[BaseException]], hopeless: bool
) -> None:
    exc = anyio.run(failure)  # type: ignore[arg-type]
    assert network.hopeless(exc) is hopeless, repr(exc)


def test_an_https_url_to_a_plain_http_service_fails_at_the_first_attempt() -> None:
    """SlsClient retries a failed attempt until its deadline; a plain-HTTP service behind an
    https:// endpoint fails the same way every time, so the call ends at once (the Spark
    streaming source waited out 30 s of attempts first: Spark user audit)."""
    from loghubd.protocol.signing import Credentials
    from loghubd.sls import SlsClient, Unreachable

    async def call(port: int) -> BaseException:
        async with aiohttp.ClientSession() as session:
            client = SlsClient(
                session,
                f"https://127.0.0.1:{port}",
                "proj",
                lambda: Credentials("id", "secret"),
                request_timeout=30.0,
                environ={},
            )
            started = anyio.current_time()
            with pytest.raises(Unreachable) as failed:
                await client.list_groups("store")
            assert anyio.current_time() - started < 10, "it retried until the deadline"
            return failed.value

    exc = anyio.run(lambda: _with_http_server(call))  # type: ignore[arg-type]
    assert "at attempt 1" in str(exc) and "use an http:// endpoint" in str(exc), exc
