"""The `parquet` processor driven directly (no daemon), read back with DuckDB: rolling,
partitions, and the crash cases a real kill only hits by chance: a crash after the
write-ahead entry committed but before the renames (finished by the next owner), a crash while
the entry was pending (discarded), and re-delivered ranges (never written twice)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.parquet as pq
import pytest
import structlog

from loghubd import Batch, ProcessorContext, wal
from loghubd.arrow import TIMESTAMP
from loghubd.errors import describe_error
from loghubd.processors import parquet, parquet_files
from loghubd.processors.parquet import ParquetFactory, ParquetProcessor
from loghubd.processors.parquet_layout import TIME_FORMATS, parse_template, partitions
from loghubd.protocol import cursor as cursors
from loghubd.protocol import pb
from loghubd.testing import RecordingTracker, make_context
from loghubd.wal import PENDING, Entry, Range, Wal

SHARD = 2
HOUR = 1_700_000_000  # 2023-11-14T22:13:20Z


def context() -> ProcessorContext:
    return make_context(project="p", logstore="ls", group="g", consumer="c")


def batch(
    first: int, groups: int, per_group: int = 3, t: int = HOUR, extra: dict[str, str] | None = None
) -> Batch:
    """`groups` log groups at positions first.. of SHARD; ids `i<position>-<n>`; `extra`:
    more fields of every log."""
    lgl = pb.LogGroupList(
        LogGroups=[
            pb.LogGroup(
                Logs=[
                    pb.Log(
                        Time=t,
                        Contents=[
                            pb.Log.Content(Key="id", Value=f"i{first + g}-{n}"),
                            pb.Log.Content(Key="level", Value="info" if n else "warn"),
                            *(pb.Log.Content(Key=k, Value=v) for k, v in (extra or {}).items()),
                        ],
                    )
                    for n in range(per_group)
                ]
            )
            for g in range(groups)
        ]
    )
    return Batch(
        SHARD,
        cursors.from_seq(SHARD, first),
        cursors.from_seq(SHARD, first + groups),
        lgl.SerializeToString(),
        groups,
    )


def factory(out: Path, **options: Any) -> ParquetFactory:
    f = ParquetFactory({"path": str(out), "max_age_s": 3600.0, **options})
    f.bind(context())
    return f


def processor(f: ParquetFactory) -> ParquetProcessor:
    p = f(SHARD)
    p.initialize(SHARD)
    return p


def ids(out: Path) -> list[str]:
    if not any(out.rglob("*.parquet")):
        return []
    rows = duckdb.sql(
        f"SELECT id FROM read_parquet('{out}/**/*.parquet', union_by_name = true)"
    ).fetchall()
    return sorted(r[0] for r in rows)


def expected(*ranges: tuple[int, int], per_group: int = 3) -> list[str]:
    return sorted(f"i{g}-{n}" for a, b in ranges for g in range(a, b) for n in range(per_group))


def test_rolls_by_rows_partitions_and_compresses(tmp_path: Path) -> None:
    out = tmp_path / "out"
    p = processor(factory(out, max_rows=10, partition="{logstore}/dt={date}/hour={hour}/{level}/"))
    t = RecordingTracker()
    p.process(batch(0, 2), t)  # 6 rows: buffered
    assert ids(out) == [] and len(t.acked) == 0
    p.process(batch(2, 2), t)  # 12 rows >= 10: written, both batches acknowledged
    assert len(t.acked) == 2
    assert ids(out) == expected((0, 4))
    dirs = sorted(str(f.parent.relative_to(out)) for f in out.rglob("*.parquet"))
    assert dirs == ["ls/dt=2023-11-14/hour=22/info", "ls/dt=2023-11-14/hour=22/warn"]
    meta = pq.read_metadata(next(out.rglob("*.parquet")))
    assert meta.row_group(0).column(0).compression == "ZSTD"
    p.shutdown(t)


@pytest.mark.parametrize(
    ("statistics", "with_min_max"),
    [
        (None, {"__time__", "__time_ns__", "__shard__"}),  # the default: "time"
        ("time", {"__time__", "__time_ns__", "__shard__"}),
        ("none", set()),
        (["id", "__time__"], {"id", "__time__"}),
        (
            "all",
            {"__time__", "__time_ns__", "__topic__", "__source__", "__shard__", "__cursor__"}
            | {"id", "level"},  # (no tags in these groups: __tags__ has no min/max)
        ),
    ],
)
def test_statistics_are_written_for_the_chosen_columns(
    tmp_path: Path, statistics: object, with_min_max: set[str]
) -> None:
    out = tmp_path / "out"
    options = {} if statistics is None else {"statistics": statistics}
    p, t = processor(factory(out, **options)), RecordingTracker()
    p.process(batch(0, 2), t)
    p.shutdown(t)
    meta = pq.read_metadata(next(out.rglob("*.parquet"))).row_group(0)
    columns = [meta.column(i) for i in range(meta.num_columns)]
    have = {c.path_in_schema for c in columns if c.is_stats_set and c.statistics.has_min_max}
    assert have == with_min_max
    if "__time__" in with_min_max:  # a reader can prune by time with them
        stats = next(c.statistics for c in columns if c.path_in_schema == "__time__")
        assert stats.min == stats.max == datetime.fromtimestamp(HOUR, UTC)


@pytest.mark.parametrize("bad", ["some", "", [""], ["id", 3], 7])
def test_bad_statistics_option_names_the_key(tmp_path: Path, bad: object) -> None:
    with pytest.raises(ValueError, match=r"^processor\.parquet\.statistics: "):
        factory(tmp_path / "out", statistics=bad)


def test_shutdown_writes_the_buffer(tmp_path: Path) -> None:
    out = tmp_path / "out"
    p, t = processor(factory(out)), RecordingTracker()
    p.process(batch(0, 3), t)
    p.shutdown(t)
    assert ids(out) == expected((0, 3)) and len(t.acked) == 1


def test_max_age_writes_from_the_timer(tmp_path: Path) -> None:
    out = tmp_path / "out"
    f = factory(out, max_age_s=0.2)
    f.start()
    try:
        p, t = processor(f), RecordingTracker()
        p.process(batch(0, 1), t)
        deadline = time.monotonic() + 10
        while len(t.acked) == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(t.acked) == 1 and ids(out) == expected((0, 1))
    finally:
        f.close()


def test_redelivered_ranges_are_not_written_twice(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = processor(factory(out, max_rows=1))
    first.process(batch(0, 4), RecordingTracker())  # committed, but "the checkpoint never moved"
    # A new owner (another process: its own factory) gets [0, 6) again, cut differently.
    second, t = processor(factory(out, max_rows=1)), RecordingTracker()
    second.process(batch(0, 2), t)
    second.process(batch(2, 4), t)
    assert len(t.acked) == 2
    assert ids(out) == expected((0, 6))


def test_commit_before_rename_is_finished_by_the_next_owner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    crashed = processor(factory(out, max_rows=1))

    def crash(*_args: Any) -> None:
        raise OSError("killed between commit and rename")

    monkeypatch.setattr(parquet_files, "rename", crash)
    with pytest.raises(OSError, match="killed"):
        crashed.process(batch(0, 3), RecordingTracker())
    monkeypatch.undo()
    assert ids(out) == []  # committed in the log, not visible yet
    assert list(out.rglob(".part-*.tmp"))
    successor, t = processor(factory(out, max_rows=1)), RecordingTracker()  # recovery renames
    assert ids(out) == expected((0, 3))
    successor.process(batch(0, 3), t)  # re-delivered: covered, acknowledged, not written
    assert len(t.acked) == 1 and ids(out) == expected((0, 3))
    assert not list(out.rglob("*.tmp"))


def test_a_dead_pending_write_is_discarded(tmp_path: Path) -> None:
    out = tmp_path / "out"
    factory(out)  # creates the directories
    wal = Wal(out, "p", "ls")
    tmp = out / "ls" / ".part-2-x-0.parquet.tmp"
    tmp.parent.mkdir(parents=True)
    tmp.write_bytes(b"half a file")
    entry = Entry(
        batch="20240101T000000Z-dead",
        project="p",
        logstore="ls",
        ranges=[Range(SHARD, cursors.from_seq(SHARD, 0), cursors.from_seq(SHARD, 3))],
        sink="parquet",
        renames=[(str(tmp), str(out / "ls" / "part-2-x-0.parquet"))],
    )
    lease = wal.begin(entry)
    assert wal.read(entry.batch) is not None and wal.read(entry.batch).state == PENDING  # type: ignore[union-attr]
    lease.release()  # the writer died: its lock is free, its entry still pending
    p, t = processor(factory(out, max_rows=1)), RecordingTracker()
    assert not tmp.exists() and wal.read(entry.batch) is None
    p.process(batch(0, 3), t)  # its ranges come again and are written once
    assert ids(out) == expected((0, 3))


def test_template_values_are_safe_path_segments() -> None:
    import pyarrow as pa

    table = pa.table(
        {
            "__time__": pa.array([0, 0, 0], pa.timestamp("us", tz="UTC")),
            "host": ["../etc", None, "a/b"],
        }
    )
    groups = partitions(
        parse_template("{logstore}/h={host}/{hour}"), table, project="p", logstore="l", shard=0
    )
    assert [(d, t.num_rows) for d, t in groups] == [
        ("l/h=_._etc/00", 1),
        ("l/h=__HIVE_DEFAULT_PARTITION__/00", 1),
        ("l/h=a_b/00", 1),
    ]
    for bad in ("/abs/{hour}", "{a!r}", "../{hour}", "{}"):
        with pytest.raises(ValueError, match="r"):
            parse_template(bad)


def test_a_value_with_an_equals_sign_makes_no_hive_directory(tmp_path: Path) -> None:
    """A bare `{level}/` segment whose value is `x=y` made a directory `x=y`, which every
    hive-partitioned reader takes for a partition `x`: DuckDB then refused every query of the
    lake (file sinks audit)."""
    out = tmp_path / "out"
    p = processor(factory(out, max_rows=1, partition="{kind}/"))
    t = RecordingTracker()
    p.process(batch(0, 1, extra={"kind": "x=y"}), t)
    p.process(batch(1, 1, extra={"kind": "plain"}), t)
    p.shutdown(t)
    dirs = sorted(str(f.parent.relative_to(out)) for f in out.rglob("*.parquet"))
    assert dirs == ["plain", "x_y"], dirs
    rows = duckdb.sql(
        f"SELECT count(*) FROM read_parquet('{out}/**/*.parquet', hive_partitioning = true)"
    ).fetchall()
    assert rows == [(6,)]


@pytest.mark.parametrize(
    ("template", "hidden"),
    [
        ("{logstore}/dt={date}/hour={hour}/", {"dt", "hour"}),
        # the key is the field itself: the directory holds its value made safe for a path
        ("level={level}/", {"level"}),
        ("lvl={level}/day={date}/", {"lvl", "day"}),
        ("{level}/{hour}/", set()),  # no hive keys
    ],
)
def test_a_field_named_as_a_hive_key_is_kept_under_its_own_name(
    tmp_path: Path, template: str, hidden: set[str]
) -> None:
    """A log's own `hour` under `hour={hour}/`: DuckDB's documented query showed the
    partition's hour instead, silently (file sinks audit). It is written as `__field__:hour`."""
    out = tmp_path / "out"
    fields = {"hour": "23", "dt": "yesterday", "lvl": "own", "day": "mine"}
    p = processor(factory(out, max_rows=1, partition=template))
    t = RecordingTracker()
    p.process(batch(0, 1, extra=fields), t)
    p.shutdown(t)
    file = next(out.rglob("*.parquet"))
    row = pq.read_table(file).slice(0, 1).to_pylist()[0]
    for name, value in fields.items():
        column = f"__field__:{name}" if name in hidden else name
        assert row.get(column) == value, (template, sorted(row))
    level = "__field__:level" if "level" in hidden else "level"
    assert row.get(level) in ("info", "warn"), (template, sorted(row))
    # and the documented (hive-partitioned) query shows the log's own value under that name
    if hidden & fields.keys():
        name = sorted(hidden & fields.keys())[0]
        got = duckdb.sql(
            f"""SELECT "__field__:{name}" FROM read_parquet('{out}/**/*.parquet',"""
            " hive_partitioning = true) LIMIT 1"
        ).fetchall()
        assert got == [(fields[name],)], got


@pytest.mark.parametrize(
    "template", ["{date}/{hour}", "{year}/{month}/{day}", "{hour}-{minute}", "{date}/{minute}"]
)
@pytest.mark.parametrize(
    "seconds",
    [
        [0, 59, 30],  # one minute: one partition without looking at each row
        [3599, 3600, 7199, 0],  # across hours, unordered
        [86399, 86400, 60, 61],  # across days and minutes
        [1_700_000_000 + 17 * i for i in range(400)],  # a couple of hours, many minutes
    ],
)
def test_time_placeholders_match_each_rows_own_time(template: str, seconds: list[int]) -> None:
    import datetime

    import pyarrow as pa

    table = pa.table({"__time__": pa.array([s * 1_000_000 + 7 for s in seconds], TIMESTAMP)})
    groups = partitions(parse_template(template), table, project="p", logstore="l", shard=0)
    got = {t: d for d, rows in groups for t in rows.column("__time__").to_pylist()}
    for s in seconds:
        when = datetime.datetime.fromtimestamp(s, datetime.UTC).replace(microsecond=7)
        wanted = template.format(**{k: when.strftime(f) for k, f in TIME_FORMATS.items()})
        assert got[when] == wanted, (s, got[when], wanted)
    assert sum(rows.num_rows for _, rows in groups) == len(seconds)  # each row once


def test_all_shards_buffers_together_stay_under_max_buffered_bytes(tmp_path: Path) -> None:
    """Buffered batches are deferred, so the daemon's byte budget does not hold them: the
    factory writes the largest buffer once every shard's together pass max_buffered_bytes."""
    out = tmp_path / "out"
    one = batch(0, 4).arrow().nbytes  # the Arrow bytes one such batch buffers
    f = factory(out, max_buffered_bytes=int(one * 2.5))
    shards = [f(s) for s in (0, 1, 2)]
    for s, p in enumerate(shards):
        p.initialize(s)
    trackers = [RecordingTracker() for _ in shards]

    def on(shard: int, first: int) -> Batch:
        b = batch(first, 4)
        return Batch(
            shard, cursors.from_seq(shard, first), cursors.from_seq(shard, first + 4), b.raw, 4
        )

    shards[0].process(on(0, 0), trackers[0])
    shards[0].process(on(0, 4), trackers[0])  # shard 0 holds 2 batches: under the limit
    assert f.buffered_bytes == 2 * one and not list(out.rglob("*.parquet"))
    shards[1].process(on(1, 0), trackers[1])  # 3 batches in all: shard 0's, the largest, goes
    assert len(trackers[0].acked) == 2 and not trackers[1].acked
    assert f.buffered_bytes == one == shards[1].buffered_bytes
    assert {p.parts[-1].split("-")[1] for p in out.rglob("*.parquet")} == {"0"}
    for s, p in enumerate(shards):
        p.process(on(s, 8), trackers[s])
        assert f.buffered_bytes == sum(q.buffered_bytes for q in shards) < one * 2.5
    for s, p in enumerate(shards):
        p.shutdown(trackers[s])
    assert f.buffered_bytes == 0
    assert [len(t.acked) for t in trackers] == [t.deferred for t in trackers]


def test_committed_deletes_the_entries_behind_the_checkpoint_and_never_waits_for_a_write(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    p = processor(factory(out, max_rows=6))
    t = RecordingTracker()
    for first in (0, 2, 4):  # three writes of 2 groups (6 rows) each
        p.process(batch(first, 2), t)
    wal_dir = out / "_loghubd_wal"
    assert len(list(wal_dir.glob("*.json"))) == 3
    with p.lock:  # a write in progress on this shard: the hook returns at once, deletes nothing
        p.committed(cursors.from_seq(SHARD, 6))
    assert len(list(wal_dir.glob("*.json"))) == 3
    p.committed(cursors.from_seq(SHARD, 3))  # the checkpoint inside the second write
    assert len(list(wal_dir.glob("*.json"))) == 2
    p.committed(cursors.from_seq(SHARD, 6))
    assert list(wal_dir.glob("*.json")) == []
    # Delivered again in this process after its entries went (a rollback): still not written
    # twice, the collected entries' coverage stays in memory. (After a restart the checkpoint
    # is past them: they are never delivered again.)
    p.process(batch(4, 2), t)
    p.shutdown(t)
    assert ids(out) == expected((0, 6))


def test_a_replay_run_again_after_the_daemon_collected_writes_nothing_twice(
    tmp_path: Path,
) -> None:
    """`loghubd dead-letters replay` writes a dead letter (a range behind the checkpoint) and
    is interrupted before it removes the letter; meanwhile the daemon's commits collect the
    write-ahead entries behind its checkpoint. The replay run again finds its earlier write
    (replay entries outlive that collection) and writes nothing twice. Past REPLAY_KEEP_S the
    entry goes like any other."""
    out = tmp_path / "out"
    letter = batch(10, 2)

    def replay_once() -> RecordingTracker:
        f = ParquetFactory({"path": str(out), "max_age_s": 3600.0})
        f.bind(make_context(project="p", logstore="ls", group="g", consumer="c", replay=True))
        p, t = processor(f), RecordingTracker()
        p.process(letter, t)
        p.shutdown(t)
        return t

    assert len(replay_once().acked) == 1
    daemon = processor(factory(out))  # the running daemon, its checkpoint far past the letter
    daemon.committed(cursors.from_seq(SHARD, 100))
    wal_dir = out / "_loghubd_wal"
    (entry_file,) = wal_dir.glob("*.json")
    assert json.loads(entry_file.read_text())["replay"] is True
    assert len(replay_once().acked) == 1  # done (the rows are there), not written again
    assert ids(out) == expected((10, 12))

    # A month later the entry is collected like the daemon's own.
    data = json.loads(entry_file.read_text())
    data["created"] = time.time() - wal.REPLAY_KEEP_S - 60
    entry_file.write_text(json.dumps(data))
    processor(factory(out)).committed(cursors.from_seq(SHARD, 100))
    assert list(wal_dir.glob("*.json")) == []


def test_a_replay_leaves_the_live_daemons_entries_ahead_of_its_checkpoint(
    tmp_path: Path,
) -> None:
    """The daemon wrote [0,4) (its entries committed) and has not committed its checkpoint
    yet (or died before it did) when a dead letter at [4,6) is replayed. The replay must not
    collect the daemon's entries as if the letter's cursor were a checkpoint: the daemon's
    re-read of [0,6) then writes nothing twice."""
    out = tmp_path / "out"
    live, t = processor(factory(out)), RecordingTracker()
    live.process(batch(0, 2), t)
    live.process(batch(2, 2), t)
    live.write("max_age")
    wal_dir = out / "_loghubd_wal"
    assert len(list(wal_dir.glob("*.json"))) == 1

    f = ParquetFactory({"path": str(out), "max_age_s": 3600.0})
    f.bind(make_context(project="p", logstore="ls", group="g", consumer="c", replay=True))
    replay, rt = processor(f), RecordingTracker()
    replay.process(batch(4, 2), rt)
    replay.shutdown(rt)
    assert len(list(wal_dir.glob("*.json"))) == 2  # the daemon's, and the replay's own

    again, t2 = processor(factory(out)), RecordingTracker()  # group checkpoint still at 0
    again.process(batch(0, 2), t2)
    again.process(batch(2, 2), t2)
    again.process(batch(4, 2), t2)  # the letter's range too: the replay's entry covers it
    again.shutdown(t2)
    assert ids(out) == expected((0, 6))


@pytest.mark.parametrize(("limit", "bounded"), [(None, True), (4 << 20, False)])
def test_a_column_of_unique_values_stops_its_dictionary_at_the_limit(
    tmp_path: Path, limit: int | None, bounded: bool
) -> None:
    """`dictionary_page_bytes` (64 KiB by default) bounds the dictionary a column of unique
    ids builds before the rest is written plain; a larger limit lets it grow."""
    out = tmp_path / "out"
    # uncompressed, so that the dictionary page's size on disk is its size
    options: dict[str, Any] = {"compression": "none"}
    if limit is not None:
        options["dictionary_page_bytes"] = limit
    p, t = processor(factory(out, **options)), RecordingTracker()
    p.process(batch(0, 10_000), t)  # 30,000 rows, every id new: ~240 KB of distinct values
    p.shutdown(t)
    (path,) = out.rglob("*.parquet")
    meta = pq.ParquetFile(path).metadata.row_group(0)
    names = [meta.column(i).path_in_schema for i in range(meta.num_columns)]
    ids_col, level = meta.column(names.index("id")), meta.column(names.index("level"))
    dictionary_bytes = ids_col.data_page_offset - ids_col.dictionary_page_offset
    assert ids_col.has_dictionary_page and level.has_dictionary_page
    # The writer checks the limit after each batch of values it adds: it may overshoot a bit.
    assert (dictionary_bytes < 2 * parquet.DICTIONARY_PAGE_BYTES) is bounded, dictionary_bytes
    assert ids(out) == expected((0, 10_000))


def test_dictionary_page_bytes_must_be_a_size(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"processor\.parquet\.dictionary_page_bytes: must be"):
        factory(tmp_path / "out", dictionary_page_bytes=10)


def test_a_paused_former_owner_writes_nothing_its_successor_wrote_and_collected(
    tmp_path: Path,
) -> None:
    """A buffers [0,10) and is paused past the group timeout; B (another process: its own
    factory) gets the shard at checkpoint 0, writes [0,10), commits the checkpoint at 10 and
    its `committed` hook deletes the entry. The deletion records the shard's floor first, so
    A's later write (its shutdown) finds [0,10) covered although no entry says so."""
    out = tmp_path / "out"
    a, ta = processor(factory(out)), RecordingTracker()
    a.process(batch(0, 10), ta)  # buffered (max_rows 1e6)
    b, tb = processor(factory(out)), RecordingTracker()
    b.process(batch(0, 10), tb)
    b.write("max_age")
    b.committed(cursors.from_seq(SHARD, 10))
    wal_dir = out / "_loghubd_wal"
    assert list(wal_dir.glob("*.json")) == []  # collected: no entry covers [0,10) any more
    a.shutdown(ta)  # A resumes
    assert ids(out) == expected((0, 10))  # once
    floor = json.loads((wal_dir / f"floor.p.ls.{SHARD}").read_text())
    assert floor["position"] == cursors.shard_base(SHARD) + 10
    # A batch straddling the floor: only its log groups above it are written.
    c, tc = processor(factory(out)), RecordingTracker()
    c.process(batch(8, 4), tc)
    c.shutdown(tc)
    assert ids(out) == expected((0, 12))


def test_the_floor_only_rises_and_a_grant_below_it_does_not_lower_it(tmp_path: Path) -> None:
    out = tmp_path / "out"
    b, t = processor(factory(out)), RecordingTracker()
    b.process(batch(0, 4), t)
    b.write("max_age")
    b.committed(cursors.from_seq(SHARD, 4))
    late = processor(factory(out))  # granted long ago at 0, its first batch only now
    late.process(batch(0, 2), RecordingTracker())
    late.write("max_age")
    assert Wal(out, "p", "ls").floor(SHARD) == cursors.shard_base(SHARD) + 4
    assert ids(out) == expected((0, 4))


def test_a_replay_writes_dead_letters_below_the_floor(tmp_path: Path) -> None:
    """[0,2) was dead-lettered (never written); the daemon wrote [2,4), committed its
    checkpoint at 4 and collected its entry, so the floor is at 4. A replay of [0,2) must
    still write it (once, even when run again); a live daemon holding it writes nothing."""
    out = tmp_path / "out"
    live, t = processor(factory(out)), RecordingTracker()
    live.process(batch(2, 2), t)
    live.write("max_age")
    live.committed(cursors.from_seq(SHARD, 4))
    assert Wal(out, "p", "ls").floor(SHARD) == cursors.shard_base(SHARD) + 4

    for _ in range(2):  # run again after an interruption: its own entry covers it
        f = ParquetFactory({"path": str(out), "max_age_s": 3600.0})
        f.bind(make_context(project="p", logstore="ls", group="g", consumer="c", replay=True))
        replay, rt = processor(f), RecordingTracker()
        replay.process(batch(0, 2), rt)
        replay.shutdown(rt)
        assert len(rt.acked) == 1
        assert ids(out) == expected((0, 4))


def test_a_batch_whose_write_fails_leaves_the_buffer_and_a_replay_writes_it_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """[0,2) is buffered (deferred); [2,12) fills the buffer and the write it starts fails
    (ENOSPC). The daemon gives up on [2,12) (dead-letters it; the checkpoint passes it): it
    must not stay buffered to be written with the next batch, or the replay of its dead
    letter would put it in the lake twice. [0,2), buffered before, still waits to be written."""
    import errno

    out = tmp_path / "out"
    f = factory(out, max_rows=30)
    live, t = processor(f), RecordingTracker()
    live.process(batch(0, 2), t)  # 6 rows: buffered
    real_write = parquet_files.write_file

    def full(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(parquet_files, "write_file", full)
    for _attempt in range(2):  # the daemon's retries, then it dead-letters the batch
        with pytest.raises(OSError, match="No space"):
            live.process(batch(2, 10), t)
        assert live.buffered_rows == 6 and list(live.buffer) == [cursors.from_seq(SHARD, 0)]
        assert f.buffered_bytes == live.buffered_bytes == batch(0, 2).arrow().nbytes
    monkeypatch.setattr(parquet_files, "write_file", real_write)
    live.process(batch(12, 10), t)  # 36 rows: written with [0,2)
    assert ids(out) == expected((0, 2), (12, 22)) and f.buffered_bytes == 0
    live.committed(cursors.from_seq(SHARD, 22))
    live.shutdown(t)

    g = ParquetFactory({"path": str(out), "max_age_s": 3600.0})
    g.bind(make_context(project="p", logstore="ls", group="g", consumer="c", replay=True))
    replay, rt = processor(g), RecordingTracker()
    replay.process(batch(2, 10), rt)  # the dead letter
    replay.shutdown(rt)
    assert ids(out) == expected((0, 22))


def wal_files(out: Path) -> list[str]:
    return sorted(p.name for p in (out / "_loghubd_wal").iterdir() if not p.name.endswith("flock"))


def test_a_commit_that_fails_after_it_reached_the_disk_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The committed entry is renamed into place, then the directory fsync fails (EIO): the
    commit raises although the entry is committed on disk. The retry must not take the
    range as written while its rows are only in temporary files: it renames them."""
    import errno

    from loghubd import files as loghubd_files

    out = tmp_path / "out"
    p, t = processor(factory(out)), RecordingTracker()
    p.process(batch(0, 10), t)
    wal_dir = out / "_loghubd_wal"
    real_fsync_dir = loghubd_files.fsync_dir

    def fsync_dir(directory: Path) -> None:
        committed = [json.loads(e.read_text())["state"] for e in wal_dir.glob("*.json")]
        if Path(directory) == wal_dir and "committed" in committed:
            raise OSError(errno.EIO, "Input/output error")
        real_fsync_dir(directory)

    monkeypatch.setattr(loghubd_files, "fsync_dir", fsync_dir)
    with pytest.raises(OSError, match="Input/output"):
        p.write("max_age")
    monkeypatch.undo()
    assert not t.acked
    p.write("max_age")  # the retry
    assert len(t.acked) == 1
    assert ids(out) == expected((0, 10)) and not list(out.rglob("*.tmp"))
    p.committed(cursors.from_seq(SHARD, 10))
    p.shutdown(t)
    assert ids(out) == expected((0, 10))


def test_a_full_disk_at_the_commit_leaves_no_temporary_entry_or_descriptor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOSPC writing the committed entry (the entry stays pending on disk): each failed
    attempt removes its temporary files, its pending entry and its lock, and closes the
    lock's descriptor; once there is space the rows are written once."""
    import errno
    import os

    from loghubd import files as loghubd_files

    out = tmp_path / "out"
    p, t = processor(factory(out)), RecordingTracker()
    p.process(batch(0, 10), t)
    real_write_all = loghubd_files.write_all

    def write_all(fd: int, data: bytes) -> None:
        if b'"state": "committed"' in data:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write_all(fd, data)

    monkeypatch.setattr(loghubd_files, "write_all", write_all)
    with pytest.raises(OSError, match="No space"):
        p.write("max_age")  # (counted after a first attempt: whatever it opens for good)
    fds = len(os.listdir("/proc/self/fd"))
    for _attempt in range(3):
        with pytest.raises(OSError, match="No space"):
            p.write("max_age")
        assert not list(out.rglob("*.tmp")) and wal_files(out) == []
        assert len(os.listdir("/proc/self/fd")) == fds
    monkeypatch.undo()
    p.write("max_age")
    assert len(t.acked) == 1 and ids(out) == expected((0, 10))
    assert not list(out.rglob("*.tmp"))


def test_a_long_partition_value_is_cut_with_a_hash_and_written(tmp_path: Path) -> None:
    """A file name is at most 255 bytes: a template on a log field whose value is longer
    failed every write of the shard (ENAMETOOLONG) for ever. Long values are cut, with a
    hash of the whole value, so distinct long values stay in distinct directories."""
    import hashlib

    import pyarrow as pa

    long_a, long_b, wide = "h" * 300, "h" * 300 + "x", "é" * 200
    out = tmp_path / "out"
    p, t = processor(factory(out, partition="{logstore}/host={host}/")), RecordingTracker()
    p.process(batch(0, 2, extra={"host": long_a}), t)
    p.process(batch(2, 2, extra={"host": "web-1"}), t)
    p.shutdown(t)
    assert len(t.acked) == 2 and ids(out) == expected((0, 4))

    from loghubd.processors.parquet_layout import KEEP_BYTES, MAX_VALUE_BYTES

    table = pa.table(
        {
            "__time__": pa.array([0] * 4, pa.timestamp("us", tz="UTC")),
            "host": [long_a, long_b, wide, "web-1"],
        }
    )
    groups = partitions(parse_template("h={host}/"), table, project="p", logstore="l", shard=0)
    dirs = [d for d, _ in groups]
    assert dirs == [
        f"h={'h' * KEEP_BYTES}-{hashlib.sha256(long_a.encode()).hexdigest()[:16]}/",
        f"h={'h' * KEEP_BYTES}-{hashlib.sha256(long_b.encode()).hexdigest()[:16]}/",
        f"h={'_' * KEEP_BYTES}-{hashlib.sha256(wide.encode()).hexdigest()[:16]}/",
        "h=web-1/",
    ]
    assert all(len(d.encode()) <= len("h=/") + MAX_VALUE_BYTES for d in dirs)


def test_a_write_that_cannot_make_its_directory_reports_that_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    """A directory name the file system refuses (a template literal over 255 bytes): the
    write's error is the one raised (not the cleanup's, which fails the same way), and its
    entry and lock are gone; a pending entry left by an older version with such a path
    (unlocked: its writer exited) does not stop the next owner's start."""
    import errno

    out = tmp_path / "out"
    too_long = "x" * 300 + "/"
    p = processor(factory(out, max_rows=1, partition=too_long))
    with pytest.raises(OSError, match="name too long") as raised:
        p.process(batch(0, 2), RecordingTracker())
    assert raised.value.errno == errno.ENAMETOOLONG
    assert "delete" not in str(raised.value).lower()
    assert wal_files(out) == []
    assert p.buffered_rows == 0  # the batch left the buffer with its failure

    tmp = f"{out}/{too_long}.part-2-old-0.parquet.tmp"
    entry = Entry(
        batch="20240101T000000Z-poison",
        project="p",
        logstore="ls",
        ranges=[Range(SHARD, cursors.from_seq(SHARD, 0), cursors.from_seq(SHARD, 2))],
        renames=[(tmp, tmp.replace("/.part", "/part").removesuffix(".tmp"))],
    )
    Wal(out, "p", "ls").begin(entry).release()  # its writer exited
    successor, t = processor(factory(out, max_rows=1)), RecordingTracker()  # starts
    assert wal_files(out) == []
    successor.process(batch(0, 2), t)
    assert ids(out) == expected((0, 2))


@pytest.mark.parametrize(
    ("options", "problems"),
    [
        ({"max_age_s": 0}, ["processor.parquet.max_age_s: must be > 0, got 0"]),
        (
            {"fields": ("id", 3)},
            ["processor.parquet.fields: a list of field names, got a list ['id', 3]"],
        ),
        (  # every key the type check refuses, in one run
            {"max_age_s": "60s", "fields": "id", "max_rows": True},
            [
                "processor.parquet.max_age_s: expected a number, got a string '60s'",
                "processor.parquet.fields: expected a list, got a string 'id'",
                "processor.parquet.max_rows: expected an integer, got true",
            ],
        ),
    ],
)
def test_bad_options_name_the_key_and_the_value(
    options: dict[str, Any], problems: list[str]
) -> None:
    with pytest.raises(ValueError, match=r"^processor\.parquet\.") as info:
        parquet.parse({"path": "/nowhere", **options})
    assert str(info.value).splitlines() == problems


@pytest.mark.parametrize(
    ("compression", "level", "message"),
    [
        ("snappy", 3, "snappy does not take level 3"),
        ("none", 5, "none does not take level 5"),
        ("gzip", 42, "gzip does not take level 42"),
        ("zstd", 100, "zstd takes a level from -131072 to 22, got 100"),  # Arrow would clamp it
        ("brotli", 12, "brotli takes a level from 0 to 11, got 12"),
    ],
)
def test_a_compression_level_the_codec_refuses_stops_the_start(
    tmp_path: Path, compression: str, level: int, message: str
) -> None:
    with pytest.raises(ValueError, match=rf"^processor\.parquet\.compression_level: {message}"):
        factory(tmp_path / "out", compression=compression, compression_level=level)


@pytest.mark.parametrize(("compression", "level"), [("zstd", 3), ("zstd", -5), ("gzip", 9)])
def test_a_compression_level_the_codec_takes_is_used(
    tmp_path: Path, compression: str, level: int
) -> None:
    out = tmp_path / "out"
    p, t = (
        processor(factory(out, compression=compression, compression_level=level)),
        RecordingTracker(),
    )
    p.process(batch(0, 2), t)
    p.shutdown(t)
    assert ids(out) == expected((0, 2))


def test_an_entry_whose_renames_are_not_done_outlives_the_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write committed, then its renames failed until the daemon gave up on the batch
    (dead-lettered: the checkpoint passes it). The entry must stay while its renames are
    not done: it is what finishes them after a crash, and what tells the replay of the
    dead letter that the rows are there (else they would be written twice)."""
    import errno

    out = tmp_path / "out"
    p, t = processor(factory(out, max_rows=1)), RecordingTracker()

    def rename(*_args: Any) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(parquet_files, "rename", rename)
    with pytest.raises(OSError, match="Input/output"):
        p.process(batch(0, 2), t)
    p.committed(cursors.from_seq(SHARD, 2))  # dead-lettered: the checkpoint passed it
    wal_dir = out / "_loghubd_wal"
    assert len(list(wal_dir.glob("*.json"))) == 1  # kept
    monkeypatch.undo()

    g = ParquetFactory({"path": str(out), "max_age_s": 3600.0})
    g.bind(make_context(project="p", logstore="ls", group="g", consumer="c", replay=True))
    replay, rt = processor(g), RecordingTracker()  # its recovery finishes the renames
    replay.process(batch(0, 2), rt)  # the dead letter: covered
    replay.shutdown(rt)
    p.shutdown(t)  # finishes nothing twice
    assert ids(out) == expected((0, 2))
    p2 = processor(factory(out))
    p2.committed(cursors.from_seq(SHARD, 2))
    assert list(wal_dir.glob("*.json")) == []  # renames done: collected


# -- What the operator reads when a write fails: what was being done, to which path, whatever
# started the write (a batch, the max_age timer, the shutdown). The failures are real.

PARTITION = "ls/dt=2023-11-14/hour=22"  # the default template's, for the rows of `batch()`
TEMPORARY = rf"{{out}}/{PARTITION}/\.part-2-[^/]+-0\.parquet\.tmp"
EPERM = r"Operation not permitted \(EPERM\)"
Immutable = Callable[[Path], None]  # the `immutable` fixture (tests/conftest.py)


def partition_under_a_file(out: Path, immutable: Immutable) -> None:
    (out / "ls").write_text("a file where the partition directories go")


def immutable_partition(out: Path, immutable: Immutable) -> None:
    (out / PARTITION).mkdir(parents=True)
    immutable(out / PARTITION)


def immutable_write_ahead_log(out: Path, immutable: Immutable) -> None:
    immutable(out / "_loghubd_wal")


@pytest.mark.parametrize(
    ("make_it_fail", "expected", "kind"),
    [
        (
            partition_under_a_file,
            rf"cannot write {TEMPORARY}: {{out}}/{PARTITION}: Not a directory \(ENOTDIR\)",
            NotADirectoryError,
        ),
        (immutable_partition, rf"cannot write {TEMPORARY}: {EPERM}", PermissionError),
        (
            immutable_write_ahead_log,
            r"cannot record the write-ahead entry (\S+) in {out}/_loghubd_wal: "
            rf"{{out}}/_loghubd_wal/\1\.lock: {EPERM}",
            PermissionError,
        ),
    ],
)
def test_a_failed_write_names_the_file_and_what_was_done(
    tmp_path: Path,
    immutable: Immutable,
    make_it_fail: Callable[[Path, Immutable], None],
    expected: str,
    kind: type[OSError],
) -> None:
    out = tmp_path / "out"
    p, t = processor(factory(out, max_rows=1)), RecordingTracker()
    make_it_fail(out, immutable)
    with pytest.raises(OSError, match=r"^cannot ") as raised:
        p.process(batch(0, 2), t)
    text = describe_error(raised.value)  # what /status, /readyz and the dead letter show
    assert re.fullmatch(expected.replace("{out}", re.escape(str(out))), text), text
    assert isinstance(raised.value, kind)  # the OSError it was, for the code that asks
    p.shutdown(t)


def started_by_a_batch(out: Path) -> str:
    p, t = processor(factory(out, max_rows=1)), RecordingTracker()
    with pytest.raises(OSError, match=r"^cannot ") as raised:
        p.process(batch(0, 2), t)
    p.shutdown(t)
    return describe_error(raised.value)


def started_by_the_timer(out: Path) -> str:
    f = factory(out, max_age_s=0.2)
    f.start()
    try:
        p, t = processor(f), RecordingTracker()
        with structlog.testing.capture_logs() as logs:
            p.process(batch(0, 2), t)
            deadline = time.monotonic() + 10
            while not [e for e in logs if e["event"] == "parquet_write_failed"]:
                assert time.monotonic() < deadline, logs
                time.sleep(0.05)
    finally:
        f.close()
    [failed] = [e for e in logs if e["event"] == "parquet_write_failed"]
    assert failed["reason"] == "max_age"
    return str(failed["error"])


def started_by_the_shutdown(out: Path) -> str:
    p, t = processor(factory(out)), RecordingTracker()
    p.process(batch(0, 2), t)
    with (
        structlog.testing.capture_logs() as logs,
        pytest.raises(OSError, match="cannot write") as raised,
    ):
        p.shutdown(t)  # raised on: the stopping daemon's exit code says the write failed
    [failed] = [e for e in logs if e["event"] == "parquet_write_failed"]
    assert failed["reason"] == "shutdown"
    assert str(raised.value) == str(failed["error"])
    assert not t.acked  # nothing acknowledged: the checkpoint stays before the rows
    return str(failed["error"])


@pytest.mark.parametrize(
    "write", [started_by_a_batch, started_by_the_timer, started_by_the_shutdown]
)
def test_whatever_started_the_write_its_failure_names_the_file(
    tmp_path: Path, write: Callable[[Path], str]
) -> None:
    out = tmp_path / "out"
    factory(out)  # makes the directory
    partition_under_a_file(out, lambda path: None)
    expected = rf"cannot write {TEMPORARY}: {{out}}/{PARTITION}: Not a directory \(ENOTDIR\)"
    text = write(out)
    assert re.fullmatch(expected.replace("{out}", re.escape(str(out))), text), text


@pytest.mark.parametrize("path", ["s3://bucket/lake", "gs://bucket/lake", "hdfs://nn:8020/lake"])
def test_a_remote_path_without_wal_dir_says_so_before_asking_the_network(path: str) -> None:
    """`s3://` without `wal_dir` was reported as the DNS failure of resolving the bucket's
    region (file sinks audit): the missing key is said first, with no network at all."""
    with pytest.raises(ValueError, match=r"^processor\.parquet\.wal_dir: required when path"):
        parquet_files.open_target(path, None)


@pytest.mark.parametrize(
    ("template", "typos"),
    [
        ("{logstore}/dt={datee}/", [("datee", "date")]),
        ("{Hour}/{__time__}/", [("Hour", "hour"), ("__time__", "date")]),
        ("{level}/{host}/{hour}/", []),  # fields and built-ins, as meant
        ("{shards}/", [("shards", "shard")]),
    ],
)
def test_a_placeholder_that_looks_misspelt_is_named(template: str, typos: list[Any]) -> None:
    """Any name not built in is a log field, so `{datee}` is legal, and sent every row to
    __HIVE_DEFAULT_PARTITION__ without a word (file sinks audit): it is warned of at start."""
    from loghubd.processors.parquet_layout import likely_typos

    assert likely_typos(parse_template(template)) == typos
