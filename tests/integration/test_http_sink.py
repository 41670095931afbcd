"""The `http` processor against a real aiohttp endpoint that fails for a while.

For its first seconds the endpoint answers 500, 429 (with Retry-After) and stalls past the
client's time-out, in turn with some 200s; then only 200. A real daemon consumes a logstore
into it while the test watches the committed checkpoints:

- every log arrives at least once in a request answered 200;
- a committed checkpoint never passes a batch some request of which was not yet acknowledged;
- a log arrives more than once only in requests that were retried (an earlier copy of it was
  answered with an error or stalled).

Also: a 4xx goes to the failure policy (dead letter) with the status and body; bad options fail
naming the key.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from loghubd import BatchInterrupted
from loghubd.processors.http import parse
from loghubd.protocol import cursor as cursors
from loghubd.testing import RecordingTracker, make_batch
from tests.integration.daemon_harness import Pool, short, wait_until
from tests.integration.http_receiver import STALL, Receiver, http_factory

pytestmark = pytest.mark.slow

LOGSTORE = "web"
GROUP = "web-group"
COUNT = 20_000
FAILING_S = 4.0
TOKEN = "s3cret"


def flaky(n: int, now: float) -> int:
    if now >= FAILING_S:
        return 200
    return (500, 429, STALL, 200)[n % 4]


def committed(pool: Pool) -> dict[int, str]:
    return {s: cp["checkpoint"] for s, cp in pool.admin.checkpoints(LOGSTORE, GROUP).items()}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver(script=flaky, retry_after=1, stall_s=3.0).start()
    yield r
    r.stop()


def test_every_log_at_least_once_and_checkpoints_wait_for_acks(
    daemon_pool: Pool, receiver: Receiver
) -> None:
    pool = daemon_pool
    pool.admin.create_logstore(LOGSTORE, 2)
    pool.produce(LOGSTORE, count=COUNT, group_size=100, prefix="h").wait()
    daemon = pool.daemon(
        LOGSTORE,
        GROUP,
        "http",
        processor="http",
        processor_options={
            "url": receiver.url,
            "bearer_token": TOKEN,
            "gzip": True,
            # ~150 B per log: the bytes cut each 1000-log part in two, 4 requests per batch of
            # 2000 logs as with batch_size 500 alone (more parts per batch would rarely let a
            # whole batch through while the endpoint fails, which the test needs to see)
            "batch_size": 1000,
            "max_body_bytes": 80_000,
            "concurrency": 2,
            "timeout_s": 1.5,
            "retry_initial_backoff_s": 0.1,
            "retry_max_backoff_s": 0.5,
        },
        consumer={"max_fetch_log_groups": 20},
    ).wait_ready()

    # Watch the committed checkpoints while the endpoint fails.
    polls: list[tuple[float, dict[int, str]]] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            cps = pool.admin.checkpoints(LOGSTORE, GROUP)
            polls.append((time.time(), {s: cp["checkpoint"] for s, cp in cps.items()}))
            time.sleep(0.1)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        ok = lambda: {i for r in list(receiver.received) if r.status == 200 for i in r.ids}  # noqa: E731
        wait_until(lambda: len(ok()) == COUNT, 60, lambda: daemon.log_tail())
        end = {s: pool.admin.cursor(LOGSTORE, s, "end") for s in (0, 1)}
        wait_until(
            lambda: (
                {s: cp["checkpoint"] for s, cp in pool.admin.checkpoints(LOGSTORE, GROUP).items()}
                == end
            ),
            30,
            lambda: daemon.log_tail(),
        )
    finally:
        stop.set()
        watcher.join()
    # The processor's own series, read while the daemon runs (every request has been answered
    # or timed out by now: the checkpoints are at the end).
    requests = {
        status: daemon.metric("loghubd_http_requests_total", status=status)
        for status in ("200", "500", "429", "error")
    }
    retries = daemon.metric("loghubd_http_retries_total")
    delivered = daemon.metric("loghubd_http_delivered_logs_total")
    seen = list(receiver.received)
    assert daemon.stop() == 0, daemon.log_tail()
    got = list(receiver.received)

    # They say what the endpoint saw: each 2xx/500/429 answer counted once, stalls counted
    # as errors (the client gave up), one retry per failed request, the logs of the 200s.
    answered = Counter(r.status for r in seen)
    assert requests["200"] == answered[200] and requests["500"] == answered[500], requests
    assert requests["429"] == answered[429] and requests["error"] >= 1, (requests, answered)
    assert retries == requests["500"] + requests["429"] + requests["error"], (retries, requests)
    assert delivered == sum(len(r.ids) for r in seen if r.status == 200) >= COUNT

    # The failures happened, all three kinds, and were retried.
    answers = Counter(r.status for r in got)
    assert answers[500] and answers[429] and answers[STALL], answers
    assert daemon.events("http_retry"), daemon.log_tail()
    assert all(r.auth == f"Bearer {TOKEN}" and r.gzip for r in got)
    # Cut by bytes as well as by count: no body past max_body_bytes, and most were cut by it.
    assert max(r.size for r in got) <= 80_000, max(r.size for r in got)
    assert max(len(r.ids) for r in got) < 1000, max(len(r.ids) for r in got)

    # Every log arrived at least once in an acknowledged request.
    acked = Counter(i for r in got if r.status == 200 for i in r.ids)
    assert set(acked) == {f"h{n}" for n in range(COUNT)}

    # Duplicates only from retried requests: every copy of an id beyond the first accepted
    # one is explained by a failed (error or stalled) copy of the same request.
    failed = Counter(i for r in got if r.status != 200 for i in r.ids)
    stalled = Counter(i for r in got if r.status == STALL for i in r.ids)
    extra = {i: n - 1 for i, n in acked.items() if n > 1}
    unexplained = {i: n for i, n in extra.items() if n > stalled[i]}
    assert not unexplained, short(unexplained)
    assert sum(acked.values()) + sum(failed.values()) > COUNT  # there were retries

    # No committed checkpoint passed a batch before all its requests were acknowledged:
    # a batch [cursor, next) is acknowledged at the time of its last first-200 part.
    acked_at: dict[tuple[int, str], dict[str, float]] = defaultdict(dict)
    parts: dict[tuple[int, str], int] = {}
    for r in got:
        if r.status == 200:
            key = (r.shard, r.cursor)
            index, count = r.part.split("/")
            parts[key] = int(count)
            acked_at[key].setdefault(index, r.at)
    done_at = {k: max(v.values()) for k, v in acked_at.items() if len(v) == parts[k]}
    last_failure = max(r.at for r in got if r.status != 200)
    moving = [
        at
        for at, cps in polls
        for s, cp in cps.items()
        if at < last_failure and cp and cp != end[s] and cursors.to_seq(s, cp) > 0
    ]
    assert moving, "no checkpoint was seen moving while the endpoint failed"
    for shard in (0, 1):
        starts = sorted((cursors.decode(c), t) for (s, c), t in done_at.items() if s == shard)
        for at, cps in polls:
            if shard not in cps or not cps[shard]:
                continue
            committed = cursors.decode(cps[shard])
            # every batch starting before the committed position was acknowledged by then
            late = [(pos, t) for pos, t in starts if pos < committed and t > at]
            assert not late, (shard, committed, at, late[:3])
            first_unacked = [pos for pos, t in starts if t > at]
            assert not first_unacked or committed <= min(first_unacked), (shard, at)


def test_a_4xx_goes_to_the_failure_policy(daemon_pool: Pool) -> None:
    receiver = Receiver(script=lambda n, now: 400).start()
    try:
        pool = daemon_pool
        pool.admin.create_logstore(LOGSTORE, 1)
        pool.produce(LOGSTORE, count=100, group_size=100, prefix="x").wait()
        daemon = pool.daemon(
            LOGSTORE,
            GROUP,
            "http",
            processor="http",
            # credentials in the URL (sent as basic auth): the notes and logs must not show them
            processor_options={"url": receiver.url.replace("://", "://ingest:hunter2@")},
            consumer={"max_attempts": 5, "on_failure": "dead_letter"},
        ).wait_ready()
        wait_until(lambda: daemon.events("batch_dead_lettered"), 30, daemon.log_tail)
        assert daemon.stop() == 0, daemon.log_tail()
    finally:
        receiver.stop()
    notes = list((daemon.dead_letter / "shard-0").glob("*.json"))
    assert len(notes) == 1
    note = json.loads(notes[0].read_text())
    assert "answered 400" in note["error"] and "answer 400" in note["error"], note
    # Sending it again cannot help: the policy applies at once, not after max_attempts.
    assert note["rejected"] is True and note["attempts"] == 1, note
    assert receiver.requests == 1
    assert "ingest:***@" in note["error"], note
    assert "hunter2" not in notes[0].read_text() + daemon.log_path.read_text(), note


def test_rejected_batches_replay_to_the_endpoint_once_it_accepts(daemon_pool: Pool) -> None:
    """The operator's path after an endpoint refused logs (a 4xx: a bad token, a schema
    change): the batches wait in the dead-letter directory; once the endpoint is fixed,
    `loghubd dead-letters replay` posts them and removes them, retrying a request the
    endpoint fails on the way (a replay once died there: its tracker had no
    `note_problem`, which the processor calls on every retry)."""
    accepting = threading.Event()
    hiccup: list[int] = []  # the one request answered 503 during the replay

    def script(n: int, now: float) -> int:
        if not accepting.is_set():
            return 403
        if not hiccup:
            hiccup.append(n)
            return 503
        return 200

    receiver = Receiver(script=script).start()
    try:
        pool = daemon_pool
        pool.admin.create_logstore(LOGSTORE, 1)
        pool.produce(LOGSTORE, count=300, group_size=100, prefix="r").wait()
        daemon = pool.daemon(
            LOGSTORE,
            GROUP,
            "http",
            processor="http",
            processor_options={"url": receiver.url, "batch_size": 100},
            consumer={"max_attempts": 5, "on_failure": "dead_letter"},
        ).wait_ready()
        end = pool.admin.cursor(LOGSTORE, 0, "end")
        wait_until(lambda: committed(pool).get(0) == end, 30, daemon.log_tail)
        assert daemon.stop() == 0, daemon.log_tail()
        assert sorted(daemon.dead_letter.glob("shard-0/*.json")), daemon.log_tail()
        assert not [r for r in receiver.received if r.status == 200]

        accepting.set()
        replay = subprocess.run(
            [
                sys.executable,
                "-m",
                "loghubd",
                "dead-letters",
                "replay",
                "-c",
                str(daemon.config_path),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, **daemon.env},
        )
        assert replay.returncode == 0, replay.stdout + replay.stderr
        assert hiccup and "http_retry" in replay.stdout + replay.stderr
    finally:
        receiver.stop()
    delivered = Counter(i for r in receiver.received if r.status == 200 for i in r.ids)
    assert set(delivered) == {f"r{n}" for n in range(300)} and set(delivered.values()) == {1}
    assert not list(daemon.dead_letter.glob("shard-0/*.json"))


def test_parts_given_up_count_as_cancelled_not_as_endpoint_errors(daemon_pool: Pool) -> None:
    """A rejected part fails the batch at once; the parts still in flight are given up. They
    are `cancelled` in loghubd_http_requests_total, not `error` (which LoghubdHttpSinkFailing
    counts as the endpoint failing)."""
    receiver = Receiver(script=lambda n, now: 400 if n == 0 else STALL, stall_s=2.0).start()
    try:
        pool = daemon_pool
        pool.admin.create_logstore(LOGSTORE, 1)
        pool.produce(LOGSTORE, count=100, group_size=100, prefix="c").wait()
        daemon = pool.daemon(
            LOGSTORE,
            GROUP,
            "http",
            processor="http",
            processor_options={"url": receiver.url, "batch_size": 20, "concurrency": 5},
            consumer={"max_attempts": 5, "on_failure": "dead_letter"},
        ).wait_ready()
        wait_until(lambda: daemon.events("batch_dead_lettered"), 30, daemon.log_tail)
        counts = {
            status: daemon.metric("loghubd_http_requests_total", status=status)
            for status in ("400", "cancelled", "error")
        }
        assert daemon.stop() == 0, daemon.log_tail()
    finally:
        receiver.stop()
    assert counts["400"] == 1 and counts["error"] == 0, counts
    assert counts["cancelled"] == receiver.requests - 1 >= 1, (counts, receiver.requests)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "processor.http.url: required"),
        ({"url": "ftp://example.com/x"}, "processor.http.url: 'ftp://example.com/x' is not an"),
        ({"url": "http://"}, "processor.http.url"),
        ({"url": "ftp://u:pw@example.com/"}, "processor.http.url: 'ftp://u:***@example.com/' is"),
        ({"url": "http://h/", "batch_size": 0}, "processor.http.batch_size: must be >= 1"),
        # Two sources of the Authorization header: every request would fail before it is sent.
        (
            {"url": "http://u:pw@h/", "bearer_token": "t"},
            "processor.http.bearer_token: the user:password in url and bearer_token each set "
            "the Authorization header: give one",
        ),
        (
            {"url": "http://h/", "headers": {"authorization": "Basic x"}, "bearer_token": "t"},
            "processor.http.bearer_token: authorization and bearer_token each set",
        ),
        ({"url": "http://h/v1 logs"}, "processor.http.url: 'http://h/v1 logs' has a space in it"),
        ({"url": "http://h/", "max_body_bytes": 100}, "processor.http.max_body_bytes: must be 0"),
        (
            {"url": "http://h/", "gzip": "yes"},
            "processor.http.gzip: expected true or false, got a string 'yes'",
        ),
        ({"url": "http://h/", "timeout_s": -1}, "processor.http.timeout_s: must be > 0, got -1"),
        ({"url": "http://h/", "header": {}}, "processor.http.header: unknown key"),
        (
            {"url": "http://h/", "retry_statuses": [401, 503, "403", True]},
            "processor.http.retry_statuses: 4xx status codes only (5xx are always retried), "
            "got 503, '403', True",
        ),
        ({"url": "http://h/", "retry_statuses": 401}, "processor.http.retry_statuses: expected"),
    ],
)
def test_bad_options_name_the_key(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=r"processor\.http\.") as info:
        parse(options)
    assert message in str(info.value)


def test_a_stop_during_an_outage_ends_the_retries_and_loses_nothing(daemon_pool: Pool) -> None:
    """SIGTERM while the endpoint is down: the request being retried is given up at once
    (here one that hangs past the shutdown grace), the batch stays unfinished and the daemon
    exits 0 instead of abandoning the shard at the end of the grace (exit 1). The first batch,
    acknowledged before the outage, is committed; the next daemon sends the rest, once."""
    up = threading.Event()

    def outage(n: int, now: float) -> int:
        if up.is_set() or n == 0:
            return 200
        return 503 if n == 1 else STALL

    receiver = Receiver(script=outage, stall_s=6.0).start()
    options = {"url": receiver.url, "timeout_s": 30.0, "retry_initial_backoff_s": 0.1}
    try:
        pool = daemon_pool
        pool.admin.create_logstore(LOGSTORE, 1)
        pool.produce(LOGSTORE, count=300, group_size=100, prefix="o").wait()
        daemon = pool.daemon(
            LOGSTORE,
            GROUP,
            "http",
            processor="http",
            processor_options=options,
            consumer={"max_fetch_log_groups": 1, "shutdown_grace": 3.0},
        ).wait_ready()
        wait_until(lambda: receiver.requests >= 3, 30, daemon.log_tail)  # 200, 503, hanging
        assert daemon.stop() == 0, daemon.log_tail()
        assert daemon.events("batch_interrupted"), daemon.log_tail()
        assert not daemon.events("shutdown_grace_expired"), daemon.log_tail()
        assert receiver.requests == 3
        first, failing = receiver.received[0], receiver.received[1]
        assert first.status == 200 and failing.status == 503
        assert committed(pool)[0] == failing.cursor != first.cursor

        up.set()
        second = pool.daemon(
            LOGSTORE, GROUP, "http-2", processor="http", processor_options=options
        ).wait_ready()
        end = pool.admin.cursor(LOGSTORE, 0, "end")
        wait_until(lambda: committed(pool).get(0) == end, 30, second.log_tail)
        assert second.stop() == 0, second.log_tail()
    finally:
        receiver.stop()
    delivered = Counter(i for r in receiver.received if r.status == 200 for i in r.ids)
    assert set(delivered) == {f"o{n}" for n in range(300)} and set(delivered.values()) == {1}


def test_a_stop_lets_the_other_parts_first_attempts_finish() -> None:
    """A batch of two requests: part 0 is answered 503 and being retried, part 1's first
    attempt is in flight (the endpoint has its body and answers slowly) when the shard
    stops. Part 0's retrying ends at once; part 1 is not cut short: it is acknowledged
    (a graceful stop cuts no request that was going well), and the batch is left to the
    next owner (`BatchInterrupted`)."""
    registry = CollectorRegistry()

    answered: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        part = request.headers["X-Loghubd-Part"]
        await request.read()
        if part.startswith("0/"):
            return web.Response(status=503)
        await anyio.sleep(1.5)
        answered.append(part)
        return web.Response(status=200)

    async def main() -> tuple[float, RecordingTracker]:
        options = {
            "batch_size": 2,
            "concurrency": 4,
            "retry_initial_backoff_s": 0.1,
            "retry_max_backoff_s": 0.2,
        }
        tracker = RecordingTracker()
        async with http_factory(handler, options, registry) as f:
            p = f(0)

            async def stop_soon() -> None:
                await anyio.sleep(0.5)
                tracker.stopping.set()

            began = anyio.current_time()
            async with anyio.create_task_group() as tg:
                tg.start_soon(stop_soon)
                with pytest.raises(BatchInterrupted, match="stopping"):
                    await p.process(make_batch([{"a": str(i)} for i in range(4)]), tracker)
            took = anyio.current_time() - began
        return took, tracker

    took, tracker = anyio.run(main)
    assert answered == ["1/2"]  # the healthy first attempt ran to its answer
    # and was counted as acknowledged
    assert registry.get_sample_value("loghubd_http_delivered_logs_total") == 2
    assert 1.4 <= took < 10, took
    assert not tracker.finished


def test_an_outage_shows_in_status_and_lag_while_it_lasts(daemon_pool: Pool) -> None:
    """The endpoint answers 503 after its first request. The sink retries inside `process`, so
    the daemon's own retries see nothing: the sink tells it (`tracker.note_problem`), and
    `/status` shows the failure as it happens, the shard not caught up. Logs written during
    the outage show as lag (measured from the oldest unfinished position while the batch is
    held), so the lag alerts can fire. Once the endpoint is back, both clear."""
    up = threading.Event()
    receiver = Receiver(script=lambda n, now: 200 if up.is_set() or n == 0 else 503).start()
    options = {"url": receiver.url, "retry_initial_backoff_s": 0.2, "retry_max_backoff_s": 0.5}
    try:
        pool = daemon_pool
        pool.admin.create_logstore(LOGSTORE, 1)
        pool.produce(LOGSTORE, count=300, group_size=100, prefix="u").wait()
        daemon = pool.daemon(
            LOGSTORE,
            GROUP,
            "http-outage",
            processor="http",
            processor_options=options,
            consumer={"max_fetch_log_groups": 1},
        ).wait_ready()

        def shard() -> dict[str, Any]:
            shards = daemon.status()["shards"]
            return shards[0] if shards else {}

        wait_until(lambda: "503" in (shard().get("processor_error") or ""), 30, daemon.log_tail)
        now = shard()
        assert now["caught_up"] is False and "503" in now["last_error"]["message"], now
        pool.produce(LOGSTORE, count=500, group_size=100, prefix="v").wait()
        wait_until(
            lambda: daemon.metric("loghubd_lag_log_groups", shard="0") >= 5,
            30,
            lambda: f"{daemon.metrics()}\n{daemon.log_tail()}",
        )
        # In logs too: 100 per group, as the first batch showed.
        assert daemon.metric("loghubd_lag_logs", shard="0") >= 500, daemon.metrics()
        retry = daemon.events("http_retry")[0]
        assert (retry["group"], retry["consumer"]) == (GROUP, "http-outage"), retry
        assert retry["reason"] == "503 Service Unavailable: 'answer 503'", retry  # its body too

        up.set()
        end = pool.admin.cursor(LOGSTORE, 0, "end")
        wait_until(lambda: committed(pool).get(0) == end, 30, daemon.log_tail)
        wait_until(
            lambda: shard().get("processor_error") == "" and shard().get("caught_up") is True,
            30,
            lambda: f"{shard()}\n{daemon.log_tail()}",
        )
        wait_until(lambda: daemon.metric("loghubd_lag_logs", shard="0") == 0, 30, daemon.log_tail)
        # the outage's end is said once per part that was retried, after its last http_retry
        recovered = daemon.events("http_recovered")
        assert len(recovered) == 1 and recovered[0]["failures"] >= 1, daemon.log_tail()
        assert recovered[0]["failures"] == len(daemon.events("http_retry")), daemon.log_tail()
        assert daemon.stop() == 0, daemon.log_tail()
    finally:
        receiver.stop()
    delivered = {i for r in receiver.received if r.status == 200 for i in r.ids}
    assert delivered == {f"u{n}" for n in range(300)} | {f"v{n}" for n in range(500)}
