"""A real daemon's peak RSS under a backlog stays within `max_bytes_in_flight` plus the fixed
overhead documented in docs/memory.md (issue #13 item 10, issue #14 item 3).

Not a timed test: the figure is the process's VmHWM (peak resident set) once the whole
backlog is processed. 8 shards hold ~96 MB of raw log groups, several times the 8 MiB budget;
before the budget was reserved before each pull, every shard could hold a whole pull in
flight plus one prefetched, so the peak grew with the backlog (the whole of it, here).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import anyio
import pytest

from loghubd.protocol import errors as E
from loghubd.protocol import pb
from loghubd.protocol.signing import Credentials
from loghubd.sls import SlsClient
from loghubd.testing.process import ServerProcess
from tests.integration.daemon_harness import PROJECT, Pool, wait_until

pytestmark = pytest.mark.slow

MIB = 1024 * 1024
LIMIT = 8 * MIB
OVERHEAD = 100 * 1000 * 1000  # docs/memory.md: the fixed overhead, idle process included
SHARDS = 8
GROUPS = 800
LOGS_PER_GROUP = 100
VALUE = "x" * 1000  # ~1 KB per log: ~100 KB per group, ~96 MB in all


def vm_hwm(pid: int) -> int:
    text = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^VmHWM:\s+(\d+) kB", text, re.M)
    assert match, text
    return int(match.group(1)) * 1024


async def write_backlog(endpoint: str, logstore: str) -> int:
    async with aiohttp.ClientSession() as session:
        client = SlsClient(session, endpoint, PROJECT, lambda: Credentials("", ""))
        with contextlib.suppress(E.ProjectAlreadyExist):
            await client.create_project("memory test")
        await client.create_logstore(logstore, SHARDS)
        raw_total = 0

        async def put(first: int, step: int) -> None:
            nonlocal raw_total
            for g in range(first, GROUPS, step):
                group = pb.LogGroup(Topic="mem", Source="test")
                for i in range(LOGS_PER_GROUP):
                    log = group.Logs.add(Time=int(time.time()))
                    log.Contents.add(Key="id", Value=f"m{g * LOGS_PER_GROUP + i}")
                    log.Contents.add(Key="body", Value=VALUE)
                raw = group.SerializeToString()
                raw_total += len(raw)
                await client.put_log_group(logstore, raw)

        async with anyio.create_task_group() as tg:
            for first in range(4):
                tg.start_soon(put, first, 4)
        return raw_total


@pytest.fixture
def pool(loghubd_server: ServerProcess, tmp_path: Path) -> Iterator[Pool]:
    made = Pool(tmp_path / "pool", loghubd_server.endpoint)
    yield made
    made.close()


def test_peak_rss_stays_within_the_budget_and_the_fixed_overhead(
    loghubd_server: ServerProcess, pool: Pool
) -> None:
    raw = anyio.run(write_backlog, loghubd_server.endpoint, "memory")
    total = GROUPS * LOGS_PER_GROUP
    daemon = pool.daemon(
        "memory",
        "mem",
        "mem",
        # The daemon's own memory: `null` without records builds no per-log objects (what a
        # processor builds from a batch is its own; bench/budget_bench.py measures both).
        processor="null",
        processor_options={"records": False},
        consumer={"max_bytes_in_flight": LIMIT},
    )
    in_flight: list[float] = []

    def drained() -> bool:
        try:
            in_flight.append(daemon.metric("loghubd_bytes_in_flight"))
            return daemon.metric("loghubd_consumed_logs_total") >= total
        except OSError:
            return False

    wait_until(drained, 120, lambda: f"backlog not drained:\n{daemon.log_tail()}", 0.05)
    peak = vm_hwm(daemon.pid)
    print(
        f"backlog {raw / 1e6:.0f} MB raw, budget {LIMIT / MIB:.0f} MiB: peak RSS "
        f"{peak / 1e6:.1f} MB, bytes in flight (sampled) max {max(in_flight) / 1e6:.1f} MB"
    )
    assert raw > 3 * LIMIT + OVERHEAD // 2  # the backlog does not fit: the bound is tested
    assert peak <= LIMIT + OVERHEAD, (peak, LIMIT + OVERHEAD)
    # Groups all of one size: beyond the limit only by the first pull's estimate (64 KiB a
    # group before any was seen).
    assert max(in_flight) <= LIMIT + MIB, max(in_flight)
    assert daemon.stop() == 0, daemon.log_tail()
