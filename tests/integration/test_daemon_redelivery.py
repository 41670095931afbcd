"""A processor's `redelivery()` (loghubd.Redeliverable) rolls a shard back while it waits
for data: a batch the processor held past `process()` comes back on a shard that receives
nothing new, and the checkpoint then reaches the end.

The `held` test processor defers the ack of each shard's first batch and writes nothing. The
data is written before the daemon starts and fits in one pull per shard (4 log groups, the
first pull's ask), so every shard's only batch is the held one. Without the hook nothing
would ever move that shard's checkpoint (the control below), and with it each shard asks
once, gets the batch again, writes it, and commits its end. A `redelivery()` that raises is
logged and asked again: the shard goes on.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.integration.daemon_harness import (
    Daemon,
    Pool,
    delivery_report,
    read_records,
    wait_until,
)

pytestmark = pytest.mark.slow

SHARDS = 2


def test_a_held_batch_is_redelivered_on_a_quiet_shard_when_the_processor_asks(
    daemon_pool: Pool,
) -> None:
    pool = daemon_pool
    pool.admin.create_logstore("held", SHARDS)
    producer = pool.produce("held", count=40, group_size=10, prefix="h")
    producer.wait()
    shards_with_data = {
        s
        for s in range(SHARDS)
        if pool.admin.cursor("held", s, "begin") != pool.admin.cursor("held", s, "end")
    }
    assert shards_with_data, "the producer wrote nothing?"

    def daemon(name: str, ask: bool, fail_asks: int = 0) -> Daemon:
        return pool.daemon(
            "held",
            f"held-{name}",
            name,
            processor="held",
            processor_options={
                "path": str(pool.dir / name / "out"),
                "ask": ask,
                "asked": str(pool.dir / f"{name}-asked.jsonl"),
                "fail_asks": fail_asks,
            },
        ).wait_ready()

    def handed(d: Daemon) -> float:  # batches through process(), the held ones included
        return d.metric("loghubd_consumed_batches_total")

    # Control: a processor that never asks keeps its held batches, and its checkpoints stay.
    control = daemon("control", ask=False)
    wait_until(lambda: handed(control) >= len(shards_with_data), 20, control.log_tail)
    time.sleep(3.0)  # three of the daemon's redelivery polls
    assert handed(control) == len(shards_with_data)
    assert not pool.committed_to_end("held", "held-control", SHARDS)
    assert not (pool.dir / "control-asked.jsonl").exists()
    assert control.stop() == 0, control.log_tail()

    # Its first two answers on each shard are wrong (an exception, then a number): each is
    # logged, and the processor is asked again later.
    asking = daemon("asking", ask=True, fail_asks=2)
    wait_until(
        lambda: pool.committed_to_end("held", "held-asking", SHARDS),
        30,
        lambda: f"not committed to the end:\n{asking.log_tail()}",
    )
    assert asking.stop() == 0, asking.log_tail()
    asked = [
        json.loads(line) for line in (pool.dir / "asking-asked.jsonl").read_text().splitlines()
    ]
    assert sorted(a["shard"] for a in asked) == sorted(shards_with_data), asked
    failed = asking.events("processor_redelivery_failed")
    assert sorted(e["shard"] for e in failed) == sorted(2 * list(range(SHARDS))), failed
    assert sorted(e["error"] for e in failed) == sorted(
        SHARDS * ["RuntimeError('held: redelivery() fails on purpose')"]
        + SHARDS * ["returned 42, not a cursor or None"]
    ), failed
    rollbacks = asking.events("shard_rollback")
    assert sorted((e["shard"], e["cursor"]) for e in rollbacks) == sorted(
        (a["shard"], a["cursor"]) for a in asked
    ), rollbacks
    delivered = [r["id"] for _, r in read_records([pool.dir / "asking" / "out"])]
    report = delivery_report(producer.ids, delivered)
    assert report == {"missing": [], "duplicated": {}, "unexpected": []}, report
