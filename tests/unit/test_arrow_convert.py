"""Log groups → Arrow: columns, per-group cursors, chunking, trimming, odd data."""

from __future__ import annotations

import pyarrow as pa
import pytest

from loghubd.arrow import (
    SCHEMA,
    convert,
    position,
    split_log_groups,
    steps_per_group,
)
from loghubd.models import Batch
from loghubd.protocol import cursor as cursors
from loghubd.protocol import pb


def make_raw(groups: int, per_group: int, *, first_id: int = 0, tags: bool = True) -> bytes:
    lgl = pb.LogGroupList()
    n = first_id
    for g in range(groups):
        group = lgl.LogGroups.add(Topic=f"topic{g}", Source="10.0.0.1")
        if tags:
            group.LogTags.add(Key="host", Value=f"h{g}")
            group.LogTags.add(Key="zone", Value="z")
        for _ in range(per_group):
            log = group.Logs.add(Time=1_700_000_000 + n, Time_ns=n % 1000 * 1000 + 7)
            log.Contents.add(Key="id", Value=str(n))
            log.Contents.add(Key="msg", Value=f"message {n}")
            n += 1
    return bytes(lgl.SerializeToString())


def test_split_matches_the_protobuf() -> None:
    raw = make_raw(7, 3)
    parts = split_log_groups(raw)
    parsed = pb.LogGroupList.FromString(raw)
    assert [bytes(p) for p in parts] == [g.SerializeToString() for g in parsed.LogGroups]
    assert split_log_groups(b"") == []
    with pytest.raises(ValueError, match="truncated"):
        split_log_groups(raw[:-3])


def test_columns_and_values() -> None:
    shard, start = 2, cursors.from_seq(2, 40)
    raw = make_raw(3, 2)
    c = convert(shard, start, raw)
    assert c.table.schema == SCHEMA
    rows = c.table.to_pylist()
    assert len(rows) == c.rows == 6
    assert c.groups == [0, 1, 2]
    assert c.offsets == [0, 2, 4, 6]
    first = rows[0]
    assert first["__time__"].timestamp() == 1_700_000_000  # 7 ns: below a microsecond
    assert first["__time_ns__"] == 1_700_000_000 * 10**9 + 7
    assert rows[1]["__time__"].timestamp() == 1_700_000_001 + 1e-6  # 1007 ns
    assert first["__topic__"] == "topic0" and first["__source__"] == "10.0.0.1"
    assert first["__tags__"] == [("host", "h0"), ("zone", "z")]
    assert first["contents"] == [("id", "0"), ("msg", "message 0")]
    assert first["shard"] == 2
    # Each row carries the cursor of its own log group: start + group index.
    assert [r["cursor"] for r in rows] == [cursors.from_seq(2, 40 + i // 2) for i in range(6)]
    # Batch.logs() agrees on the contents.
    batch = Batch(shard, start, cursors.from_seq(2, 43), raw, 3)
    assert [r["id"] for r in batch.logs()] == [dict(r["contents"])["id"] for r in rows]


def test_chunks_stay_small() -> None:
    raw = make_raw(50, 300)  # 15,000 rows, 300 per group
    c = convert(0, cursors.from_seq(0, 0), raw, chunk_rows=5000)
    sizes = [b.num_rows for b in c.table.to_batches()]
    assert sum(sizes) == 15_000
    assert len(sizes) == 3 and max(sizes) <= 5000 + 300


def test_keep_only_some_groups_and_slice_later() -> None:
    raw = make_raw(10, 3)
    c = convert(0, cursors.from_seq(0, 100), raw, keep=[(2, 4), (8, 20)])
    assert c.groups == [2, 3, 8, 9]
    ids = [int(dict(r["contents"])["id"]) for r in c.table.to_pylist()]
    assert ids == [6, 7, 8, 9, 10, 11, 24, 25, 26, 27, 28, 29]
    # Trimming again (zero-copy): only group 3 and 9 stay.
    k = c.keep([(3, 4), (9, 10)])
    assert k.groups == [3, 9]
    assert k.offsets == [0, 3, 6]
    assert [int(dict(r["contents"])["id"]) for r in k.table.to_pylist()] == [
        9,
        10,
        11,
        27,
        28,
        29,
    ]
    assert c.keep([]).rows == 0


def test_non_utf8_values_are_escaped_not_fatal() -> None:
    lgl = pb.LogGroupListRaw()
    group = lgl.LogGroups.add(Topic="t")
    log = group.Logs.add(Time=1)
    log.Contents.add(Key="ok", Value=b"fine")
    log.Contents.add(Key="bad", Value=b"caf\xe9")
    good = pb.LogGroupList()
    good.LogGroups.add(Topic="t2").Logs.add(Time=2).Contents.add(Key="k", Value="v")
    raw = good.SerializeToString() + lgl.SerializeToString()  # a valid group, then a bad one
    c = convert(0, cursors.from_seq(0, 0), raw)
    rows = c.table.to_pylist()
    assert [r["contents"] for r in rows] == [[("k", "v")], [("ok", "fine"), ("bad", "caf\\xe9")]]


def test_cursor_arithmetic() -> None:
    a, b = cursors.from_seq(1, 10), cursors.from_seq(1, 15)
    assert steps_per_group(a, b, 5) == position(a)
    assert steps_per_group(a, b, 3) is None  # a server-side query dropped groups
    assert position("not a cursor!") is None
    raw = make_raw(2, 1)
    c = convert(1, a, raw, per_group=False)
    assert {r["cursor"] for r in c.table.to_pylist()} == {a}


def test_empty_batch() -> None:
    c = convert(0, cursors.from_seq(0, 0), b"")
    assert c.rows == 0 and c.table.schema == SCHEMA
    assert isinstance(c.table, pa.Table)


def test_conversion_in_child_processes_matches_and_survives_a_dead_child() -> None:
    from loghubd_spark.convert_worker import ConvertPool

    raw = make_raw(6, 4)
    start = cursors.from_seq(3, 9)
    local = convert(3, start, raw, keep=[(1, 5)])
    pool = ConvertPool(1)
    pool.start()
    try:
        remote = pool.convert(3, start, raw, keep=[(1, 5)])
        assert remote.table.equals(local.table)
        assert (remote.groups, remote.offsets) == (local.groups, local.offsets)
        [child] = pool._children
        child.proc.kill()
        child.proc.wait(10)
        again = pool.convert(3, start, raw)  # converted in this thread; the child replaced
        assert again.table.equals(convert(3, start, raw).table)
        [fresh] = pool._children
        assert fresh is not child and fresh.proc.poll() is None
        assert pool.convert(3, start, raw).rows == 24
    finally:
        pool.close()
    assert all(c.proc.poll() is not None for c in [child, fresh])
