"""Ordered consumer group across a split and a merge, while keyed logs are written.

One daemon consumes every shard with the `record` test processor, which appends each log to
one file in delivery order. For every key the delivered `seq` values must be exactly
0, 1, 2, ... in that order, and every parent shard must be fully delivered before any log of
its children. The split happens before the daemon starts, so the sealed parent still holds a
backlog when its children already receive data: a consumer that did not wait for parents
would interleave them.
"""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from loghubd.protocol import cursor as cursors
from tests.integration.daemon_harness import TIMEOUT, Pool, wait_until

pytestmark = pytest.mark.slow

LOGSTORE = "keyed"
GROUP = "ordered"
KEYS = 20
COUNT = 60_000
GROUP_SIZE = 50


def end_seq(pool: Pool, shard: int) -> int:
    return cursors.to_seq(shard, pool.admin.cursor(LOGSTORE, shard, "end"))


def test_ordered_group_keeps_per_key_order_across_split_and_merge(daemon_pool: Pool) -> None:
    pool = daemon_pool
    pool.admin.create_logstore(LOGSTORE, 2)  # 0: [00.., 80..), 1: [80.., ff..]
    pool.admin.create_group(LOGSTORE, GROUP, int(TIMEOUT), True)
    producer = pool.produce(
        LOGSTORE, count=COUNT, rate=10_000, group_size=GROUP_SIZE, keys=KEYS, prefix="k"
    )
    # A backlog of many pulls (see max_fetch_log_groups below) in the parent before the split.
    wait_until(lambda: end_seq(pool, 0) >= 150, 20, "shard 0 got too little data")
    _parent, left, right = (s["shardID"] for s in pool.admin.split(LOGSTORE, 0, "4" + "0" * 31))
    wait_until(lambda: end_seq(pool, left) > 0 and end_seq(pool, right) > 0, 20, "no child data")

    record = pool.dir / "delivered.jsonl"
    daemon = pool.daemon(
        LOGSTORE,
        GROUP,
        "solo",
        processor="record",
        processor_options={"path": str(record)},
        consumer={"order": True, "max_fetch_log_groups": 10},
    )
    daemon.wait_ready()
    # Merge the two children while the parent may still be draining and logs keep coming.
    wait_until(lambda: record.exists() and record.stat().st_size > 0, 20, "nothing delivered")
    merged, _l, _r = (s["shardID"] for s in pool.admin.merge(LOGSTORE, left))
    assert producer.running(), "the merge was meant to happen while logs are written"
    producer.wait()

    lineage = {left: [0], right: [0], merged: [left, right]}
    shards = [0, 1, left, right, merged]

    def all_committed() -> bool:
        cps = pool.admin.checkpoints(LOGSTORE, GROUP)
        return all(
            cps.get(s, {}).get("checkpoint")
            and cursors.to_seq(s, cps[s]["checkpoint"]) == end_seq(pool, s)
            for s in shards
        )

    wait_until(all_committed, 60, lambda: f"{pool.admin.group_status(LOGSTORE, GROUP)}")
    assert daemon.stop() == 0, daemon.log_tail()

    rows = [json.loads(line) for line in record.read_text().splitlines()]
    ids = [r["id"] for r in rows]
    assert len(ids) == COUNT and set(ids) == set(producer.ids), (len(ids), len(set(ids)))

    # Per key: exactly 0, 1, 2, ... in delivery order.
    per_key: dict[str, list[int]] = defaultdict(list)
    for r in rows:
        per_key[r["key"]].append(int(r["seq"]))
    assert len(per_key) == KEYS
    bad = {
        k: next(i for i, seq in enumerate(v) if seq != i)
        for k, v in per_key.items()
        if v != list(range(len(v)))
    }
    assert not bad, {
        k: f"delivered seqs {per_key[k][max(0, i - 3) : i + 3]} around position {i}"
        for k, i in bad.items()
    }

    # Parents before children, over the whole delivery.
    positions: dict[int, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        positions[r["shard"]].append(i)
    assert set(positions) == set(shards), sorted(positions)
    for child, parents in lineage.items():
        for parent in parents:
            assert max(positions[parent]) < min(positions[child]), (
                f"shard {child} delivered from line {min(positions[child])} before its parent "
                f"{parent} finished (line {max(positions[parent])})"
            )
    # Every read-only shard ended on the server. (Not necessarily by the daemon's end-of-shard
    # commit: a commit of its end made as it caught up, once the shard was read-only, ends it
    # too, and the daemon is then told to stop it before its fetcher sees the end.)
    states = {s["shard"]: s["state"] for s in pool.admin.group_status(LOGSTORE, GROUP)["shards"]}
    assert all(states[s] == "over" for s in (0, left, right)), states


def test_a_shard_split_after_its_end_was_committed_still_ends(daemon_pool: Pool) -> None:
    """A caught-up shard commits its end while it is still writable; then it is split. Its
    end is already the group's checkpoint, and the server marks it OVER only on a commit made
    after it became read-only: the daemon sends that commit anyway, so the children (which an
    ordered group holds back until their parent is OVER) are consumed."""
    pool = daemon_pool
    pool.admin.create_logstore("caughtup", 1)
    pool.admin.create_group("caughtup", "ordered-end", int(TIMEOUT), True)
    before = pool.produce("caughtup", count=1_000, rate=20_000, group_size=50, prefix="b")
    before.wait()
    record = pool.dir / "caughtup.jsonl"
    daemon = pool.daemon(
        "caughtup",
        "ordered-end",
        "solo-end",
        processor="record",
        processor_options={"path": str(record)},
        consumer={"order": True, "checkpoint_interval": 0.5},
    )
    daemon.wait_ready()

    def committed_seq(shard: int) -> int | None:
        cp = pool.admin.checkpoints("caughtup", "ordered-end").get(shard, {}).get("checkpoint")
        return cursors.to_seq(shard, cp) if cp else None

    end = cursors.to_seq(0, pool.admin.cursor("caughtup", 0, "end"))
    wait_until(lambda: committed_seq(0) == end, 30, "the shard's end was never committed")
    _parent, left, right = (s["shardID"] for s in pool.admin.split("caughtup", 0, "8" + "0" * 31))
    after = pool.produce("caughtup", count=1_000, rate=20_000, group_size=50, prefix="a")
    after.wait()

    def children_done() -> bool:
        return all(
            (seq := committed_seq(s)) is not None
            and seq == cursors.to_seq(s, pool.admin.cursor("caughtup", s, "end"))
            for s in (left, right)
        )

    wait_until(children_done, 30, lambda: f"{pool.admin.group_status('caughtup', 'ordered-end')}")
    assert daemon.stop() == 0, daemon.log_tail()
    ids = [json.loads(line)["id"] for line in record.read_text().splitlines()]
    assert sorted(ids) == sorted([*before.ids, *after.ids])
