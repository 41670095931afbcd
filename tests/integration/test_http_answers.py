"""What the `http` processor does with each kind of answer, against a real aiohttp endpoint
in the test's own event loop (no daemon): which 4xx are retried (408 and 429 always, others
when `retry_statuses` lists them), and that a redirect is a refusal naming where it points,
never followed (followed, a 302 turns the POST into a GET without the logs, and a 200 to
that GET would pass for their acknowledgement)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import anyio
import pytest
from aiohttp import web

from loghubd.processors.http import HttpRejected
from loghubd.testing import RecordingTracker, make_batch
from tests.integration.http_receiver import http_factory

Answer = Callable[[int], web.Response]


def run(answer: Answer, options: Mapping[str, Any]) -> tuple[list[str], BaseException | None]:
    """One batch of 3 logs through a fresh processor; the requests the endpoint saw
    (`METHOD path`) and what `process` raised (None: the batch was acknowledged)."""
    seen: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        await request.read()
        seen.append(f"{request.method} {request.path}")
        return answer(len(seen) - 1)

    async def main() -> BaseException | None:
        fast = {"retry_initial_backoff_s": 0.01, "retry_max_backoff_s": 0.02, **options}
        tracker = RecordingTracker()
        async with http_factory(handler, fast) as f:
            try:
                await f(0).process(make_batch([{"a": str(i)} for i in range(3)]), tracker)
            except Exception as exc:  # the test asserts on it
                return exc
        assert tracker.saved, "acknowledged, but no checkpoint saved"
        return None

    return seen, anyio.run(main)


def status(*codes: int) -> Answer:
    """Answer the n-th request with codes[n] (the last one from then on)."""
    return lambda n: web.Response(status=codes[min(n, len(codes) - 1)], text=f"answer {n}")


@pytest.mark.parametrize(
    ("codes", "options", "requests", "rejected"),
    [
        ((408, 200), {}, 2, None),  # Request Timeout: later, not never
        ((429, 503, 200), {}, 3, None),
        ((401, 200), {}, 1, "answered 401 Unauthorized"),
        ((403, 200), {}, 1, "answered 403 Forbidden"),
        # A token being rotated, a permission not yet granted: wait for the fix.
        ((401, 401, 200), {"retry_statuses": [401, 403]}, 3, None),
        ((403, 200), {"retry_statuses": [401, 403]}, 2, None),
        ((404, 200), {"retry_statuses": [401, 403]}, 1, "answered 404 Not Found"),
        ((413, 200), {}, 1, "answered 413"),
    ],
)
def test_which_answers_are_retried(
    codes: tuple[int, ...], options: dict[str, Any], requests: int, rejected: str | None
) -> None:
    seen, raised = run(status(*codes), options)
    assert len(seen) == requests, seen
    if rejected is None:
        assert raised is None, raised
    else:
        assert isinstance(raised, HttpRejected), raised
        assert rejected in str(raised), raised


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_a_redirect_is_refused_naming_where_it_points(code: int) -> None:
    def answer(n: int) -> web.Response:
        if n == 0:
            return web.Response(status=code, headers={"Location": "/elsewhere"})
        return web.Response(status=200)  # what a followed redirect would have been told

    seen, raised = run(answer, {})
    assert seen == ["POST /ingest"], seen  # not followed
    assert isinstance(raised, HttpRejected), raised
    assert f"answered {code}" in str(raised) and "to '/elsewhere'" in str(raised), raised
    assert "set url to where it points" in str(raised), raised
