"""Processor plugins in a real daemon: the example distribution `plugins/loghubd-example`
(installed in the virtualenv) is found through its `loghubd` entry point, and its `grep`
processor writes only the matching logs."""

from __future__ import annotations

import json

import pytest

from loghubd.protocol import cursor as cursors
from tests.integration.daemon_harness import Pool, read_records, wait_until

pytestmark = pytest.mark.slow


def test_example_grep_plugin_is_loaded_by_entry_point_and_filters(daemon_pool: Pool) -> None:
    pool = daemon_pool
    ls, group, count = "plugged", "grep-group", 5_000
    pool.admin.create_logstore(ls, 2)
    pool.produce(ls, count=count, group_size=100, prefix="g").wait()
    out = pool.dir / "grep-out"
    daemon = pool.daemon(
        ls,
        group,
        "grepper",
        processor="grep",
        processor_options={"field": "level", "pattern": "ERROR", "path": str(out)},
    ).wait_ready()

    def done() -> bool:
        cps = pool.admin.checkpoints(ls, group)
        return len(cps) == 2 and all(
            cp["checkpoint"]
            and cp["checkpoint"] == pool.admin.cursor(ls, s, "end")
            and cursors.to_seq(s, cp["checkpoint"]) > 0
            for s, cp in cps.items()
        )

    wait_until(done, 20, daemon.log_tail)
    assert daemon.stop() == 0, daemon.log_tail()

    [started] = daemon.events("consumer_started")
    assert started["processor"] == "grep"
    records = [r for _shard, r in read_records([out])]
    # `loghubd produce` gives log n the level LEVELS[n % 5]: ERROR for n % 5 == 4.
    assert sorted(r["id"] for r in records) == sorted(f"g{n}" for n in range(4, count, 5))
    assert all(r["level"] == "ERROR" for r in records), json.dumps(records[:3])
