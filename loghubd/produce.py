"""`loghubd produce`: write sample or synthetic logs, at a rate, keyed or not.

For the main-job command, demos, tests and benchmarks. Every log carries a unique `id`
(`<prefix><n>`), so a consumer's output can be checked against what was written; keyed logs
also carry `key` and `seq` (their position among that key's logs) and are routed by the MD5 of
the key, as SLS producers do, so per-key order can be checked.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp
import anyio

from loghubd.admin.connect import positive_seconds
from loghubd.admin.errors import USAGE, UserError
from loghubd.protocol import errors as E
from loghubd.protocol import pb
from loghubd.protocol.signing import Credentials
from loghubd.sls import SlsClient

LEVELS = ("INFO", "INFO", "INFO", "WARN", "ERROR")


@dataclass(frozen=True, slots=True)
class ProduceOptions:
    endpoint: str
    project: str
    logstore: str
    count: int
    rate: float = 0.0  # logs per second; 0 = as fast as possible
    group_size: int = 100  # logs per log group (one PutLogs each)
    keys: int = 0  # 0 = load-balanced; N = keyed over N distinct keys
    prefix: str = ""
    start: int = 0
    create_shards: int = 0  # > 0: create project and logstore (if missing) with N shards
    access_key_id: str = ""
    access_key_secret: str = ""
    topic: str = "loghubd-produce"
    # Seconds for each call, retries included: how long a service that does not answer (not
    # started yet, restarting) is waited for before the error.
    request_timeout: float = 30.0


def key_hash(key: str) -> str:
    return hashlib.md5(key.encode()).hexdigest()


async def ensure_logstore(client: SlsClient, logstore: str, shards: int) -> None:
    with contextlib.suppress(E.ProjectAlreadyExist):
        await client.create_project("created by loghubd produce")
    with contextlib.suppress(E.LogStoreAlreadyExist):
        await client.create_logstore(logstore, shards)


async def produce(
    opts: ProduceOptions, progress: Callable[[int], None] | None = None
) -> dict[str, int | float]:
    """Write the logs; Ctrl-C (SIGINT) or SIGTERM stops early, and the summary then says how
    many were written (`"interrupted": 1`)."""
    written = 0
    interrupted = False
    started = time.monotonic()

    def count(n: int) -> None:
        nonlocal written
        written = n
        if progress is not None:
            progress(n)

    async with anyio.create_task_group() as tg:

        async def stop_on_signal() -> None:
            nonlocal interrupted
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for _ in signals:
                    interrupted = True
                    tg.cancel_scope.cancel()

        tg.start_soon(stop_on_signal)
        await write_logs(opts, count)
        tg.cancel_scope.cancel()
    return summarize(opts, written, time.monotonic() - started, interrupted=interrupted)


def summarize(
    opts: ProduceOptions, written: int, seconds: float, *, interrupted: bool
) -> dict[str, int | float]:
    """The line `loghubd produce` prints at the end (and `BackgroundProducer.wait` returns)."""
    summary: dict[str, int | float] = {
        "written": written,
        "first_id": opts.start,
        "last_id": opts.start + written - 1,
        "seconds": round(seconds, 3),
    }
    if interrupted:
        summary["interrupted"] = 1
    return summary


async def write_logs(opts: ProduceOptions, count: Callable[[int], None]) -> None:
    """The writing itself, without the signal handling: `count(n)` is called after each
    PutLogs with the logs written so far (an exception it raises stops the writing). Also
    what `loghubd.testing.BackgroundProducer` runs in a thread."""
    creds = Credentials(opts.access_key_id, opts.access_key_secret)
    started = time.monotonic()
    written = 0
    seqs: dict[str, int] = {}
    async with aiohttp.ClientSession() as session:
        client = SlsClient(
            session,
            opts.endpoint,
            opts.project,
            lambda: creds,
            request_timeout=opts.request_timeout,
        )
        if opts.create_shards:
            await ensure_logstore(client, opts.logstore, opts.create_shards)
        n = opts.start
        end = opts.start + opts.count
        group_index = 0
        while n < end:
            group = pb.LogGroup(Topic=opts.topic, Source="loghubd-produce")
            key = f"k{group_index % opts.keys}" if opts.keys else None
            group_index += 1
            now = int(time.time())
            for _ in range(min(opts.group_size, end - n)):
                log = group.Logs.add(Time=now)
                fields = [
                    ("id", f"{opts.prefix}{n}"),
                    ("level", LEVELS[n % len(LEVELS)]),
                    ("msg", f"synthetic log {n}"),
                ]
                if key is not None:
                    seqs[key] = seqs.get(key, -1) + 1
                    fields += [("key", key), ("seq", str(seqs[key]))]
                for k, v in fields:
                    log.Contents.add(Key=k, Value=v)
                n += 1
            await client.put_log_group(
                opts.logstore, group.SerializeToString(), hash_key=key_hash(key) if key else None
            )
            written = n - opts.start
            count(written)
            if opts.rate > 0:
                ahead = written / opts.rate - (time.monotonic() - started)
                if ahead > 0:
                    await anyio.sleep(ahead)


def check(opts: ProduceOptions, progress_every: float = 0.0) -> None:
    """A UserError (exit 2) naming the flag of the first value `produce` cannot use: a
    negative count wrote nothing and said so with exit 0, a group size of 0 never ended."""
    numbers: list[tuple[str, float, float]] = [  # flag, value, lowest accepted
        ("--count", opts.count, 0),
        ("--start", opts.start, 0),
        ("--rate", opts.rate, 0),
        ("--group-size", opts.group_size, 1),
        ("--keys", opts.keys, 0),
        ("--create-shards", opts.create_shards, 0),
        ("--progress", progress_every, 0),
    ]
    for flag, value, lowest in numbers:
        if not (math.isfinite(value) and value >= lowest):
            what = "a positive number" if lowest else "0 or more"
            raise UserError(USAGE, f"{flag} {value:g}: must be {what}")
    positive_seconds("--timeout", opts.request_timeout)


def run(opts: ProduceOptions, progress_every: float = 0.0) -> int:
    """Print the summary as one JSON line; exit 130 when interrupted. With `progress_every`,
    a JSON line `{"written": N, "rate": R}` goes to stderr every that many seconds. Errors (an
    unreachable service, a refusal) propagate to the CLI, which names them in one line."""
    check(opts, progress_every)
    last = [time.monotonic(), 0]

    def progress(written: int) -> None:
        now = time.monotonic()
        if progress_every > 0 and now - last[0] >= progress_every:
            rate = (written - last[1]) / (now - last[0])
            print(json.dumps({"written": written, "rate": round(rate)}), file=sys.stderr)
            last[0], last[1] = now, written

    try:
        summary = anyio.run(produce, opts, progress)
    except KeyboardInterrupt:  # before the signal handler was in place: nothing written
        summary = summarize(opts, 0, 0.0, interrupted=True)
    print(json.dumps(summary), flush=True)
    return 130 if summary.get("interrupted") else 0
