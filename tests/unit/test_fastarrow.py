"""loghubd._fastarrow, the C converter behind arrow.convert(): the same tables, groups,
offsets and record-batch sizes as the pure Python path (upb + lists), or the same exception.

These tests call the extension directly, whatever LOGHUBD_NO_C says (no SparkSession needed).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loghubd import arrow, arrow_view
from loghubd.arrow import Converted, convert
from loghubd.protocol import cursor as cursors
from loghubd.protocol import pb
from tests.unit.fresh_python import fresh_python

fastarrow: Any = pytest.importorskip("loghubd._fastarrow", reason="built without a C compiler")

START = cursors.from_seq(1, 1000)
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@contextmanager
def c_path(enabled: bool) -> Iterator[None]:
    saved = arrow.c_parse
    arrow.c_parse = fastarrow.parse if enabled else None
    try:
        yield
    finally:
        arrow.c_parse = saved


def run(raw: bytes, enabled: bool, **kw: Any) -> Converted | type[Exception]:
    with c_path(enabled):
        try:
            return convert(1, START, raw, **kw)
        except Exception as e:
            return type(e)


def same(raw: bytes, **kw: Any) -> Converted | type[Exception]:
    """Converts with both paths; asserts they agree and returns the C path's result."""
    pure, fast = run(raw, False, **kw), run(raw, True, **kw)
    if not isinstance(pure, Converted):
        assert fast is pure, f"pure path raised {pure.__name__}, C path gave {fast}"
        return fast
    assert isinstance(fast, Converted), f"C path raised {fast}, the pure path did not"
    fast.table.validate(full=True)
    assert fast.table.schema == arrow.SCHEMA
    assert fast.table.equals(pure.table)
    assert (fast.groups, fast.offsets) == (pure.groups, pure.offsets)
    sizes = [b.num_rows for b in fast.table.to_batches()]
    assert sizes == [b.num_rows for b in pure.table.to_batches()]
    return fast


# -- hand-built wire bytes ------------------------------------------------------------------


def key(num: int, wire: int) -> bytes:
    return pb.encode_varint(num << 3 | wire)


def ld(num: int, payload: bytes) -> bytes:
    """A length-delimited field."""
    return key(num, 2) + pb.encode_varint(len(payload)) + payload


def vi(num: int, value: int) -> bytes:
    return key(num, 0) + pb.encode_varint(value)


def f32(num: int, value: int) -> bytes:
    return key(num, 5) + value.to_bytes(4, "little")


def f64(num: int, value: int) -> bytes:
    return key(num, 1) + value.to_bytes(8, "little")


def pair(k: bytes, v: bytes) -> bytes:
    return ld(1, k) + ld(2, v)


def group(logs: list[bytes], *extra: bytes) -> bytes:
    return b"".join(ld(1, log) for log in logs) + b"".join(extra)


def log(time: int, *contents: tuple[bytes, bytes], ns: int | None = None) -> bytes:
    out = vi(1, time) + b"".join(ld(2, pair(k, v)) for k, v in contents)
    return out if ns is None else out + f32(4, ns)


def frame(*groups: bytes) -> bytes:
    return pb.frame_log_groups(list(groups))


# -- strategies -----------------------------------------------------------------------------

utf8 = st.text(max_size=20).map(str.encode)
# lone byte, Latin-1, surrogate, overlong (2, 3, 4 bytes), above U+10FFFF, cut short
BAD = [b"\xff", b"caf\xe9", b"\xed\xa0\x80", b"\xc0\xaf", b"\xe0\x80\xaf", b"\xf0\x80\x80\xaf"]
BAD += [b"\xf4\x90\x80\x80", b"ok\xe2\x82", b"\x80 8 bytes", b"7 bytes\x80"]
bad_utf8 = st.one_of(
    st.sampled_from(BAD), st.binary(min_size=1, max_size=12).filter(lambda b: not _valid(b))
)


def _valid(b: bytes) -> bool:
    try:
        b.decode()
    except UnicodeDecodeError:
        return False
    return True


def unknown(ld_numbers: st.SearchStrategy[int], numbers: st.SearchStrategy[int]) -> Any:
    """Fields the message does not know (or knows with another wire type): skipped."""
    return st.one_of(
        st.builds(vi, numbers, st.integers(0, 2**64 - 1)),
        st.builds(f64, numbers, st.integers(0, 2**64 - 1)),
        st.builds(f32, numbers, st.integers(0, 2**32 - 1)),
        st.builds(ld, ld_numbers, st.binary(max_size=6)),
    )


def log_groups(strings: Any) -> Any:
    """LogGroup encodings whose strings come from `strings`: fields in any order, missing,
    repeated, unknown, with odd varints."""
    any_number = st.one_of(st.integers(1, 40), st.integers(1, 2**29 - 1))
    high = st.one_of(st.integers(7, 40), st.integers(7, 2**29 - 1))
    pair_msg = st.lists(
        st.one_of(
            st.builds(ld, st.just(1), strings),
            st.builds(ld, st.just(2), strings),
            unknown(st.integers(3, 40), st.integers(1, 40)),
        ),
        max_size=4,
    ).map(b"".join)
    log_msg = st.lists(
        st.one_of(
            st.builds(vi, st.just(1), st.integers(0, 2**32 - 1) | st.integers(0, 2**64 - 1)),
            st.builds(ld, st.just(2), pair_msg),
            st.builds(ld, st.just(2), pair_msg),
            st.builds(f32, st.just(4), st.one_of(st.just(0), st.integers(0, 2**32 - 1))),
            unknown(st.sampled_from([1, 3, 4, 5, 9, 1000]), any_number),
        ),
        max_size=8,
    ).map(b"".join)
    group_msg = st.lists(
        st.one_of(
            st.builds(ld, st.just(1), log_msg),
            st.builds(ld, st.just(1), log_msg),
            st.builds(ld, st.sampled_from([2, 3, 4, 5]), strings),
            st.builds(ld, st.just(6), pair_msg),
            unknown(high, any_number),
        ),
        max_size=10,
    ).map(b"".join)
    return group_msg


valid_group = log_groups(utf8)
mixed_group = log_groups(st.one_of(utf8, utf8, bad_utf8))


# Made once: a strategy built inside a composite is a new object at every draw, validated and
# labelled again by hypothesis each time.
_pb_text = st.text(max_size=12)
_pb_keys = st.sampled_from(["a", "b", ""]) | _pb_text  # duplicate keys too
_pb_tags = st.lists(st.tuples(_pb_keys, _pb_text), max_size=3)
_pb_contents = st.lists(st.tuples(_pb_keys, _pb_text), max_size=5)
_pb_time_ns = st.one_of(st.just(0), st.integers(0, 999_999_999))


@st.composite
def protobuf_group(draw: st.DrawFn) -> bytes:
    """What the SDKs send, serialized by protobuf itself."""
    g = pb.LogGroup()
    if draw(st.booleans()):
        g.Topic = draw(_pb_text)
    if draw(st.booleans()):
        g.Source = draw(_pb_text)
    for k, v in draw(_pb_tags):
        g.LogTags.add(Key=k, Value=v)
    for _ in range(draw(st.integers(0, 6))):
        entry = g.Logs.add(Time=draw(st.integers(0, 2**32 - 1)))
        ns = draw(_pb_time_ns)
        if ns:
            entry.Time_ns = ns
        for k, v in draw(_pb_contents):
            entry.Contents.add(Key=k, Value=v)
    data: bytes = g.SerializeToString()
    return data


# -- properties -----------------------------------------------------------------------------


@SETTINGS
@given(st.lists(st.one_of(protobuf_group(), valid_group), max_size=6), st.integers(1, 12))
def test_valid_groups_convert_in_c_as_in_python(groups: list[bytes], chunk_rows: int) -> None:
    raw = frame(*groups)
    same(raw, chunk_rows=chunk_rows)
    # Valid UTF-8 and no protobuf groups: C converts every log group itself.
    with c_path(True), mock.patch.object(arrow, "_add_group", side_effect=AssertionError):
        convert(1, START, raw, chunk_rows=chunk_rows)


@SETTINGS
@given(st.lists(mixed_group, max_size=6), st.integers(1, 12))
def test_strings_that_are_not_utf8_are_escaped_as_in_python(
    groups: list[bytes], chunk_rows: int
) -> None:
    same(frame(*groups), chunk_rows=chunk_rows)


@SETTINGS
@given(
    st.lists(st.one_of(protobuf_group(), mixed_group), max_size=8),
    st.lists(st.tuples(st.integers(-2, 10), st.integers(-2, 10)), max_size=3),
    st.booleans(),
    st.integers(1, 9),
)
def test_keep_spans_and_per_group(
    groups: list[bytes], spans: list[tuple[int, int]], per_group: bool, chunk_rows: int
) -> None:
    raw = frame(*groups)
    c = same(raw, keep=spans, per_group=per_group, chunk_rows=chunk_rows)
    pure = run(raw, False, keep=spans, per_group=per_group, chunk_rows=chunk_rows)
    assert isinstance(c, Converted) and isinstance(pure, Converted)
    again = [(1, 3), (5, 8)]
    trimmed, pure_trimmed = c.keep(again), pure.keep(again)
    assert trimmed.table.equals(pure_trimmed.table)
    assert (trimmed.groups, trimmed.offsets) == (pure_trimmed.groups, pure_trimmed.offsets)


_to_break = st.one_of(protobuf_group(), mixed_group)
_breaks = st.sampled_from(["cut", "set", "insert", "delete"])


@st.composite
def broken(draw: st.DrawFn) -> bytes:
    """A valid group cut, overwritten, spliced or padded somewhere."""
    data = bytearray(draw(_to_break))
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(data)))
        how = draw(_breaks)
        if how == "cut":
            del data[at:]
        elif how == "set" and at < len(data):
            data[at] = draw(st.integers(0, 255))
        elif how == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=4))
        else:
            del data[at : at + draw(st.integers(1, 4))]
    return bytes(data)


@SETTINGS
@given(st.lists(st.one_of(broken(), st.binary(max_size=40), protobuf_group()), max_size=4))
def test_broken_groups_never_crash_and_fail_as_in_python(groups: list[bytes]) -> None:
    same(frame(*groups))


@SETTINGS
@given(st.binary(max_size=60))
def test_arbitrary_batches(raw: bytes) -> None:
    same(raw)


# -- examples -------------------------------------------------------------------------------


WHERE = ["key", "value", "tag key", "tag value", "topic", "source"]


def not_utf8_group(where: str, bad: bytes) -> bytes:
    """A log group whose string at `where` (one of WHERE) is `bad`, the others plain."""
    s = {w: bad if w == where else w.replace(" ", "_").encode() for w in WHERE}
    return group(
        [log(1, (s["key"], s["value"])), log(2, (b"k2", b"v2"))],
        ld(6, pair(s["tag key"], s["tag value"])),
        ld(3, s["topic"]),
        ld(4, s["source"]),
    )


@pytest.mark.parametrize("bad", BAD)
@pytest.mark.parametrize("where", WHERE)
def test_each_string_that_is_not_utf8(where: str, bad: bytes) -> None:
    bad_group = not_utf8_group(where, bad)
    good = group([log(5, (b"a", b"b"))], ld(3, b"t0"))
    c = same(frame(good, bad_group, good), chunk_rows=2)
    assert isinstance(c, Converted)
    assert c.offsets == [0, 1, 3, 4]
    rows = c.table.slice(1, 2).to_pylist()
    strings = {r["__topic__"] for r in rows} | {r["__source__"] for r in rows}
    strings |= {x for r in rows for kv in r["__tags__"] + r["contents"] for x in kv}
    assert bad.decode("utf-8", "backslashreplace") in strings


def test_wire_details_as_upb() -> None:
    cases = [
        group([vi(1, 2**64 - 1) + f32(4, 7)]),  # Time: the low 32 bits of a 10-byte varint
        group([vi(1, 1) + vi(1, 2) + f32(4, 1) + f32(4, 2_000)]),  # the last one wins
        group([ld(2, ld(2, b"v") + ld(1, b"k") + ld(1, b"k2"))]),  # last key; any order
        group([b""]),  # a log with nothing: Time 0, no contents
        group([vi(4, 5) + f32(1, 9) + ld(1, b"x") + log(3)]),  # known numbers, other wire types
        group([log(1, (b"k", b"v"))], ld(6, b""), ld(6, ld(1, b"only key"))),  # tags half-empty
        ld(3, b"topic after logs") + group([log(1)]) + ld(3, b"last topic") + vi(1, 5),
        group([log(1, (b"\x00", "é€𝄞".encode()))]),
        key(1, 2) + b"\x80\x00",  # a length in a redundant 2-byte varint
        key(7, 3) + key(7, 4) + group([log(1)]),  # an unknown group (wire type 3): Python's
        b"\xb8\x80\x80\x80\x00\x01" + group([log(1)]),  # a tag in 5 bytes (its most)
    ]
    c = same(frame(*cases))
    assert isinstance(c, Converted)
    rows = c.table.to_pylist()
    assert rows[0]["__time_ns__"] == (2**32 - 1) * 10**9 + 7
    assert rows[1]["__time_ns__"] == 2 * 10**9 + 2_000
    assert rows[2]["contents"] == [("k2", "v")]
    assert rows[4]["__time_ns__"] == 3 * 10**9
    assert rows[5]["__tags__"] == [("", ""), ("only key", "")]
    assert rows[6]["__topic__"] == "last topic"
    assert rows[7]["contents"] == [("\x00", "é€𝄞")]
    assert len(rows) == 11


@pytest.mark.parametrize(
    "data",
    [
        key(0, 0) + b"\x00",  # field number 0
        key(0, 2) + b"\x00",
        ld(1, key(0, 5) + b"\x00" * 4),
        key(1, 6),  # wire type 6
        key(3, 2) + b"\x05ab",  # longer than the group
        ld(1, key(1, 0) + b"\xff" * 10 + b"\x01"),  # a varint in 11 bytes
        ld(1, key(1, 0) + b"\xff" * 10),  # a varint cut short
        ld(1, key(9, 1) + b"\x00" * 7),  # a fixed64 cut short
        ld(1, key(4, 5) + b"\x00" * 3),  # a fixed32 cut short
        ld(1, key(2, 2) + b"\x02" + key(1, 2) + b"\x05"),  # a content longer than its log
        b"\xb8\x80\x80\x80\x80\x00\x01",  # a tag (field 7, varint) in 6 bytes
        key(7, 4),  # an end-group without its start
    ],
)
def test_malformed_groups_raise_as_in_python(data: bytes) -> None:
    assert same(frame(group([log(1)]), data)) is pb.DecodeError


def test_chunks_around_a_group_converted_in_python() -> None:
    plain = group([log(i, (b"k", b"v")) for i in range(3)])
    bad = group([log(9, (b"k", b"\xff"))] * 2)
    c = same(frame(plain, bad, plain, plain, bad), chunk_rows=4)
    assert isinstance(c, Converted)
    assert [b.num_rows for b in c.table.to_batches()] == [5, 6, 2]


def test_big_values_and_many_rows() -> None:
    value = "ü" * 100_000
    g = pb.LogGroup(Topic="t" * 1000)
    for i in range(300):
        g.Logs.add(Time=i).Contents.add(Key=f"k{i}", Value=value if i % 50 == 0 else "v")
    same(frame(g.SerializeToString()) * 3)


# -- which path runs ------------------------------------------------------------------------


def _no_c(env: dict[str, str]) -> bool:
    return env.get("LOGHUBD_NO_C", "") not in ("", "0")


@pytest.mark.parametrize("value", ["1", "0", None])
def test_loghubd_no_c_disables_the_extension(value: str | None) -> None:
    env = {} if value is None else {"LOGHUBD_NO_C": value}
    out = fresh_python("import loghubd.arrow as a; print(a.c_parse is None)", **env)
    assert out == str(value == "1")


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs /proc")
def test_conversion_children_load_the_extension() -> None:
    from loghubd_spark.convert_worker import ConvertPool

    pool = ConvertPool(1)
    pool.start()
    try:
        [child] = pool._children
        maps = Path(f"/proc/{child.proc.pid}/maps").read_text()
    finally:
        pool.close()
    assert ("_fastarrow" in maps) == (not _no_c(dict(os.environ)))


def test_empty_input_makes_an_empty_table() -> None:
    c = same(b"")
    assert isinstance(c, Converted) and c.rows == 0
    assert isinstance(c.table, pa.Table)


# -- fields(): the columns of Batch.arrow() straight from the wire --------------------------


def view(raw: bytes, enabled: bool, fields: list[str] | None, steps: int | None) -> Any:
    """Batch.arrow()'s record batch with the C or the Python path, or the exception type.
    `steps`: the positions the batch spans (None: as many as it has log groups)."""
    saved = arrow_view.c_fields
    arrow_view.c_fields = fastarrow.fields if enabled else None
    try:
        count = len(arrow.split_log_groups(raw)) if steps is None else steps
        return arrow_view.fields_batch(7, START, cursors.from_seq(1, 1000 + count), raw, fields)
    except Exception as e:
        return type(e)
    finally:
        arrow_view.c_fields = saved


def same_view(
    raw: bytes, fields: list[str] | None = None, steps: int | None = None
) -> pa.RecordBatch | type[Exception]:
    """Batch.arrow() with both paths; asserts they agree and returns the C path's result."""
    try:
        arrow.split_log_groups(raw)
    except ValueError:
        steps = 0  # the Python path raises before looking at the cursors
    pure, fast = view(raw, False, fields, steps), view(raw, True, fields, steps)
    if not isinstance(pure, pa.RecordBatch):
        assert fast is pure, f"pure path raised {pure.__name__}, C path gave {fast}"
        return fast
    assert isinstance(fast, pa.RecordBatch), f"C path raised {fast}, the pure path did not"
    fast.validate(full=True)
    assert fast.schema == pure.schema
    assert fast.equals(pure), (fast.to_pylist(), pure.to_pylist())
    return fast


field_lists = st.one_of(
    st.none(), st.lists(st.sampled_from(["a", "b", "", "k", "zz", "__topic__"]), max_size=4)
)


@SETTINGS
@given(st.lists(st.one_of(protobuf_group(), valid_group), max_size=6), field_lists)
def test_fields_of_valid_groups_in_c_as_in_python(groups: list[bytes], fields: Any) -> None:
    raw = frame(*groups)
    same_view(raw, fields)
    # Valid UTF-8 and no protobuf groups: C takes the batch.
    assert fastarrow.fields(raw, fields and list(dict.fromkeys(fields)), pa.allocate_buffer)


@SETTINGS
@given(
    st.lists(st.one_of(protobuf_group(), mixed_group), max_size=6),
    field_lists,
    st.one_of(st.none(), st.integers(0, 9)),
)
def test_fields_escape_and_cursors_as_in_python(
    groups: list[bytes], fields: Any, steps: int | None
) -> None:
    same_view(frame(*groups), fields, steps)


@SETTINGS
@given(st.lists(st.one_of(broken(), st.binary(max_size=40), protobuf_group()), max_size=4))
def test_fields_of_broken_groups_fail_as_in_python(groups: list[bytes]) -> None:
    same_view(frame(*groups))


@SETTINGS
@given(st.binary(max_size=60), field_lists)
def test_fields_of_arbitrary_batches(raw: bytes, fields: Any) -> None:
    same_view(raw, fields)


@pytest.mark.parametrize("bad", BAD)
@pytest.mark.parametrize("where", WHERE)
def test_fields_leave_batches_that_are_not_utf8_to_python(where: str, bad: bytes) -> None:
    raw = frame(group([log(5, (b"a", b"b"))]), not_utf8_group(where, bad))
    assert fastarrow.fields(raw, None, pa.allocate_buffer) is None
    rb = same_view(raw)
    assert isinstance(rb, pa.RecordBatch) and rb.num_rows == 3
    if where == "value":  # a field not asked for does not matter
        assert fastarrow.fields(raw, ["a"], pa.allocate_buffer) is not None
        same_view(raw, ["a"])


def test_fields_wire_details_nulls_and_repeats() -> None:
    rows = [
        log(i, *([(b"a", b"%d" % i)] if i % 3 else []), (b"b", b"x"), (b"a", b"last"))
        for i in range(20)
    ]
    rows += [log(20 + i, (b"c%d" % (i % 3), b"")) for i in range(19)]  # nulls over byte edges
    cases = [
        group(rows[:9]),
        group([]),
        group(rows[9:], ld(3, b"topic"), ld(6, pair(b"t", b"v"))),
        group([vi(1, 2**64 - 1) + f32(4, 7) + ld(2, ld(2, b"v") + ld(1, b"k") + ld(1, b"k2"))]),
        group([b""]),
        group([vi(4, 5) + f32(1, 9) + ld(1, b"x") + log(3)]),
    ]
    for fields in (None, ["c1", "a", "nope", "a", "k2"]):
        rb = same_view(frame(*cases), fields)
        assert isinstance(rb, pa.RecordBatch)
    rb = same_view(frame(*cases))
    assert isinstance(rb, pa.RecordBatch)
    assert rb.column("a").to_pylist()[:3] == ["last"] * 3
    assert rb.column("c0").null_count == rb.num_rows - 7
    assert rb.column("k2").to_pylist()[-3] == "v"


def test_fields_beyond_the_most_columns_go_to_python() -> None:
    g = group([log(i, (b"k%d" % i, b"v")) for i in range(5000)])
    raw = frame(g)
    assert fastarrow.fields(raw, None, pa.allocate_buffer) is None
    rb = same_view(raw, ["k1", "k4999"])
    assert isinstance(rb, pa.RecordBatch) and rb.column("k4999").null_count == 4999


def test_fields_big_values_and_no_c_switch() -> None:
    value = "ü" * 100_000
    g = pb.LogGroup(Topic="t" * 1000)
    for i in range(300):
        g.Logs.add(Time=i).Contents.add(Key=f"k{i % 7}", Value=value if i % 50 == 0 else "v")
    same_view(frame(g.SerializeToString()) * 3)
    out = subprocess.run(
        [sys.executable, "-c", "import loghubd.arrow_view as a; print(a.c_fields is None)"],
        env={**os.environ, "LOGHUBD_NO_C": "1"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "True"


def test_fields_reject_names_that_are_not_str() -> None:
    with pytest.raises(TypeError):
        fastarrow.fields(b"", [1], pa.allocate_buffer)
    assert fastarrow.fields(b"", ["\udcff"], pa.allocate_buffer) is None  # not UTF-8: Python
