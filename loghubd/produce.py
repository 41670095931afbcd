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
import sys
import time
from dataclasses import dataclass

import aiohttp
import anyio

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


def key_hash(key: str) -> str:
    return hashlib.md5(key.encode()).hexdigest()


async def ensure_logstore(client: SlsClient, logstore: str, shards: int) -> None:
    with contextlib.suppress(E.ProjectAlreadyExist):
        await client.create_project("created by loghubd produce")
    with contextlib.suppress(E.LogStoreAlreadyExist):
        await client.create_logstore(logstore, shards)


async def produce(opts: ProduceOptions) -> dict[str, int | float]:
    creds = Credentials(opts.access_key_id, opts.access_key_secret)
    started = time.monotonic()
    written = 0
    seqs: dict[str, int] = {}
    async with aiohttp.ClientSession() as session:
        client = SlsClient(
            session, opts.endpoint, opts.project, lambda: creds, request_timeout=30.0
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
            if opts.rate > 0:
                ahead = written / opts.rate - (time.monotonic() - started)
                if ahead > 0:
                    await anyio.sleep(ahead)
    elapsed = time.monotonic() - started
    return {
        "written": written,
        "first_id": opts.start,
        "last_id": opts.start + written - 1,
        "seconds": round(elapsed, 3),
    }


def run(opts: ProduceOptions) -> int:
    try:
        summary = anyio.run(produce, opts)
    except E.SlsError as exc:
        print(f"loghubd produce: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(summary))
    return 0
