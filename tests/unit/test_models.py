"""Batch: the flattened record format processors see, and the non-UTF-8 fallback."""

from __future__ import annotations

import gc
import importlib
import json
import tracemalloc
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loghubd import models
from loghubd.models import Batch, Record
from loghubd.protocol import pb


def batch_of(*groups: object) -> Batch:
    raw = pb.frame_log_groups([g.SerializeToString() for g in groups])  # type: ignore[attr-defined]
    return Batch(3, "c0", "c1", raw, len(groups))


def test_records_are_flat_dicts_in_sdk_order() -> None:
    group = pb.LogGroup(Topic="topic", Source="10.0.0.1")
    group.LogTags.add(Key="host", Value="web-1")
    log = group.Logs.add(Time=1700000000, Time_ns=42)
    log.Contents.add(Key="level", Value="WARN")
    log.Contents.add(Key="msg", Value="disk 91% full")
    group.Logs.add(Time=1700000001).Contents.add(Key="level", Value="INFO")
    records = list(batch_of(group).logs())
    assert records == [
        {
            "__time__": 1700000000,
            "__time_ns_part__": 42,
            "__topic__": "topic",
            "__source__": "10.0.0.1",
            "__tag__:host": "web-1",
            "level": "WARN",
            "msg": "disk 91% full",
        },
        {
            "__time__": 1700000001,
            "__topic__": "topic",
            "__source__": "10.0.0.1",
            "__tag__:host": "web-1",
            "level": "INFO",
        },
    ]
    assert list(records[0])[:5] == [
        "__time__",
        "__time_ns_part__",
        "__topic__",
        "__source__",
        "__tag__:host",
    ]
    assert batch_of(group).log_count == 2


def test_non_utf8_value_mid_batch_falls_back_without_losing_or_repeating_records() -> None:
    good = pb.LogGroupRaw(Topic="t")
    for value in (b"a", b"b"):
        good.Logs.add(Time=1).Contents.add(Key="v", Value=value)
    bad = pb.LogGroupRaw(Topic="t")
    for value in (b"c", b"\xff\xfed", b"e"):
        bad.Logs.add(Time=1).Contents.add(Key="v", Value=value)
    batch = batch_of(good, bad)
    values = [r["v"] for r in batch.logs()]
    assert values == ["a", "b", "c", "\udcff\udcfed", "e"]
    # lossless: the original bytes come back, and JSON can carry them
    assert values[3].encode("utf-8", "surrogateescape") == b"\xff\xfed"
    assert json.loads(json.dumps(values)) == values
    assert batch.log_count == 5


# Content keys never start with "__": those names are the record's own fields.
_KEYS = st.text(alphabet="abc_01", min_size=1, max_size=8).filter(lambda k: not k.startswith("__"))


@given(st.lists(st.lists(st.tuples(_KEYS, st.binary(max_size=8)), max_size=4), max_size=6))
def test_every_log_comes_out_once_whatever_the_bytes(logs: list[list[tuple[str, bytes]]]) -> None:
    group = pb.LogGroupRaw(Topic="t")
    for contents in logs:
        log = group.Logs.add(Time=7)
        for key, value in contents:
            log.Contents.add(Key=key, Value=value)
    records = list(batch_of(group).logs())
    assert len(records) == len(logs)
    for record, contents in zip(records, logs, strict=True):
        expected = {k: v.decode("utf-8", "surrogateescape") for k, v in contents}
        assert {k: v for k, v in record.items() if not k.startswith("__")} == expected


def test_known_log_count_never_decodes() -> None:
    group = pb.LogGroup(Topic="t")
    for i in range(3):
        group.Logs.add(Time=1700000000 + i).Contents.add(Key="id", Value=str(i))
    counted, decoded, untouched = batch_of(group), batch_of(group), batch_of(group)
    assert untouched.known_log_count is None
    assert counted.log_count == 3 and counted.known_log_count == 3
    assert len(list(decoded.logs())) == 3 and decoded.known_log_count == 3
    assert untouched.known_log_count is None  # still: reading it decoded nothing


# -- the C path decodes in chunks --------------------------------------------------------------


def _import_fastlog() -> ModuleType | None:
    try:
        return importlib.import_module("loghubd._fastlog")
    except ImportError:
        return None


# The C extension, whatever LOGHUBD_NO_C says (the tests compare it with the Python path).
FASTLOG = _import_fastlog()
needs_c = pytest.mark.skipif(FASTLOG is None, reason="built without a C compiler")


@pytest.fixture
def fastlog() -> ModuleType:
    if FASTLOG is None:
        pytest.skip("built without a C compiler")
    return FASTLOG


def logs_of(batch: Batch, fast: ModuleType | None, monkeypatch: pytest.MonkeyPatch) -> Any:
    """What batch.logs() yields, with each record's key order, on the C or the Python path."""
    monkeypatch.setattr(models, "_fastlog", fast)
    return [list(r.items()) for r in batch.logs()]


def numbered_group(first: int, n: int, bad_key_at: int | None = None) -> bytes:
    """A serialized LogGroup of logs `first`..; log `bad_key_at` has a key that is not UTF-8."""
    group = pb.LogGroupRaw(Topic="t", Source="s")
    group.LogTags.add(Key="host", Value="h")
    for i in range(first, first + n):
        log = group.Logs.add(Time=1700000000 + i)
        log.Contents.add(Key="id", Value=str(i).encode())
        log.Contents.add(Key="k!" if i == bad_key_at else "level", Value=b"INFO")
    data: bytes = group.SerializeToString()
    return data.replace(b"\x0a\x02k!", b"\x0a\x02k\xff")  # protobuf won't build it


def batch_of_raw(groups: list[bytes]) -> Batch:
    return Batch(3, "c0", "c1", pb.frame_log_groups(groups), len(groups))


def test_refused_bytes_in_a_later_chunk_resume_on_the_python_path(
    fastlog: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A content key that is not UTF-8 (the C decoder refuses it) in the second chunk: the
    records of the first chunk are not repeated, none is lost, and all are the Python path's."""
    monkeypatch.setattr(models, "CHUNK_LOGS", 4)
    calls: list[int] = []

    def decode_chunk(raw: bytes, offset: int, max_logs: int) -> Any:
        calls.append(offset)
        return fastlog.decode_chunk(raw, offset, max_logs)

    spy = ModuleType("spy")
    spy.decode_chunk = decode_chunk  # type: ignore[attr-defined]
    groups = [numbered_group(3 * i, 3, bad_key_at=7) for i in range(5)]  # log 7: chunk 2
    fast = logs_of(batch_of_raw(groups), spy, monkeypatch)
    assert len(calls) == 2  # the first chunk came from C, the second raised
    python = logs_of(batch_of_raw(groups), None, monkeypatch)
    assert fast == python
    assert [dict(r)["id"] for r in fast] == [str(i) for i in range(15)]
    assert (b"k\xff", "INFO") in fast[7]  # what the Python path yields for that key
    batch = batch_of_raw(groups)
    monkeypatch.setattr(models, "_fastlog", fastlog)
    assert sum(1 for _ in batch.logs()) == 15 and batch.known_log_count == 15


def test_a_batch_of_several_chunks_yields_the_python_paths_records(
    fastlog: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(models, "CHUNK_LOGS", 5)
    groups = [numbered_group(0, n) for n in (1, 7, 0, 3, 5, 2, 9)]
    bad = pb.LogGroupRaw(Topic="t")  # values that are not UTF-8 are the C path's too
    bad.Logs.add(Time=1).Contents.add(Key="v", Value=b"\xff\xfed")
    groups.insert(3, bad.SerializeToString())
    batch = batch_of_raw(groups)
    fast = logs_of(batch, fastlog, monkeypatch)
    assert batch.known_log_count == len(fast) == 28
    assert fast == logs_of(batch_of_raw(groups), None, monkeypatch)


def traced_peak(run: Any) -> tuple[int, Any]:
    """The peak of traced memory (bytes) while `run()` runs, over what was traced before, and
    what it returned."""
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        result = run()
        return tracemalloc.get_traced_memory()[1] - base, result
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("path", ["c", "python"])
def test_dropping_each_record_never_holds_the_whole_batch(
    path: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Memory, not time: iterating a batch of 20,000 small logs while dropping each record
    peaks far below holding them all (the C path holds one chunk of CHUNK_LOGS records)."""
    fast = request.getfixturevalue("fastlog") if path == "c" else None
    monkeypatch.setattr(models, "_fastlog", fast)
    groups = []
    for g in range(100):
        group = pb.LogGroup(Topic="t", Source="10.0.0.1")
        group.LogTags.add(Key="host", Value="web-1")
        for i in range(200):
            log = group.Logs.add(Time=1700000000 + i)
            log.Contents.add(Key="id", Value=f"{g}-{i}")
            log.Contents.add(Key="level", Value="INFO")
        groups.append(group)
    raw = pb.frame_log_groups([g.SerializeToString() for g in groups])

    def drop_each() -> int:
        return sum(1 for _ in Batch(0, "c", "n", raw, 100).logs())

    def hold_all() -> list[Record]:
        return list(Batch(0, "c", "n", raw, 100).logs())

    streamed, n = traced_peak(drop_each)
    held, records = traced_peak(hold_all)
    assert n == len(records) == 20_000
    del records
    assert streamed < held / 3, (streamed, held)


# -- log_count: counted in C when it can be ------------------------------------------------


def counts(raw: bytes) -> tuple[Any, Any]:
    """Batch.log_count of `raw` with the C extension and without (the exception type where it
    raises), each on a fresh batch."""
    results: list[Any] = []
    for ext in (FASTLOG, None):
        with pytest.MonkeyPatch.context() as m:
            m.setattr(models, "_fastlog", ext)
            try:
                results.append(Batch(3, "c0", "c1", raw, 1).log_count)
            except Exception as e:
                results.append(type(e))
    return results[0], results[1]


@needs_c
@given(
    st.lists(st.tuples(st.integers(0, 6), st.none() | st.integers(0, 6)), max_size=5),
    st.data(),
)
def test_log_count_is_the_same_with_and_without_the_extension(
    groups: list[tuple[int, int | None]], data: st.DataObject
) -> None:
    """Some groups have a content key that is not UTF-8 (the C counter refuses it, the
    Python path counts); truncated bytes are counted or refused alike by both."""
    raw = pb.frame_log_groups([numbered_group(0, n, bad_key_at=bad) for n, bad in groups])
    expected = sum(n for n, _ in groups)
    assert counts(raw) == (expected, expected)
    fast, python = counts(raw[: data.draw(st.integers(0, len(raw)))])
    assert fast == python


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param(b"", 0, id="empty"),
        pytest.param(pb.frame_log_groups([numbered_group(0, n) for n in (3, 0, 5)]), 8, id="C"),
        pytest.param(
            pb.frame_log_groups([numbered_group(0, 3), numbered_group(0, 4, bad_key_at=2)]),
            7,
            id="key not UTF-8: Python",
        ),
        pytest.param(b"\x0a\x05\x0a\x01", pb.DecodeError, id="malformed: raises"),
    ],
)
def test_log_count_cases(raw: bytes, expected: Any, fastlog: ModuleType) -> None:
    assert counts(raw) == (expected, expected)


def test_log_count_uses_count_logs_once_and_upb_when_it_refuses(
    fastlog: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = pb.frame_log_groups([numbered_group(0, n) for n in (2, 0, 5)])
    calls: list[bytes] = []

    def count_logs(data: bytes) -> int:
        calls.append(data)
        return int(fastlog.count_logs(data))

    spy = ModuleType("spy")
    spy.count_logs = count_logs  # type: ignore[attr-defined]
    monkeypatch.setattr(models, "_fastlog", spy)
    with monkeypatch.context() as m:
        m.setattr(pb, "LogGroupListRaw", None)  # the C path parses nothing with protobuf
        batch = batch_of_raw([numbered_group(0, n) for n in (2, 0, 5)])
        before = batch.known_log_count
        assert before is None
        assert batch.log_count == 7 and batch.log_count == 7 and batch.known_log_count == 7
    assert calls == [raw]  # once: then cached

    def refuse(data: bytes) -> int:
        calls.append(data)
        raise ValueError("refused")

    spy.count_logs = refuse  # type: ignore[attr-defined]
    batch = batch_of_raw([numbered_group(0, n) for n in (2, 0, 5)])
    assert batch.log_count == 7 and batch.log_count == 7  # upb's count
    assert len(calls) == 2

    # parsed already: counted from the parse, without walking the bytes again
    batch = batch_of_raw([numbered_group(0, n) for n in (2, 0, 5)])
    assert len(batch.log_group_list.LogGroups) == 3
    assert batch.log_count == 7 and len(calls) == 2


@given(
    st.lists(st.integers(0, 4), max_size=8).flatmap(
        lambda sizes: st.tuples(
            st.just(sizes),
            st.integers(0, len(sizes)).flatmap(
                lambda a: st.tuples(st.just(a), st.integers(a, len(sizes)))
            ),
        )
    )
)
def test_part_is_those_log_groups(case: tuple[list[int], tuple[int, int]]) -> None:
    """`part(a, b)` holds exactly the logs of groups a to b-1 (groups of any size, empty ones
    included), with the cursors given."""
    sizes, (a, b) = case
    groups = []
    for g, size in enumerate(sizes):
        group = pb.LogGroup(Topic=f"t{g}")
        for i in range(size):
            group.Logs.add(Time=1700000000).Contents.add(Key="id", Value=f"{g}-{i}")
        groups.append(group)
    whole = batch_of(*groups)
    part = whole.part(a, b, "from", "to")
    assert (part.shard, part.cursor, part.next_cursor, part.group_count) == (3, "from", "to", b - a)
    expected = [r for r in whole.logs() if a <= int(r["id"].split("-")[0]) < b]
    assert list(part.logs()) == expected
    assert part.log_count == sum(sizes[a:b])


@pytest.mark.parametrize(("a", "b"), [(-1, 1), (0, 3), (2, 1)])
def test_a_part_beyond_the_batch_is_refused(a: int, b: int) -> None:
    whole = batch_of(pb.LogGroup(Topic="a"), pb.LogGroup(Topic="b"))
    with pytest.raises(ValueError, match="log groups"):
        whole.part(a, b, "x", "y")


def test_a_part_of_bytes_that_are_not_log_groups_is_refused() -> None:
    with pytest.raises(ValueError, match="not a log group record"):
        Batch(0, "c0", "c1", b"\x12\x00", 1).part(0, 1, "x", "y")
    with pytest.raises(ValueError, match="cut short"):
        Batch(0, "c0", "c1", b"\x0a\x05ab", 1).part(0, 1, "x", "y")
