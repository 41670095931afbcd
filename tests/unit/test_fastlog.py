"""loghubd._fastlog, the C decoder behind Batch.logs(): it returns exactly what the Python path
(upb parse + models._flatten) returns, or raises ValueError and Batch.logs() takes the Python
path. Its counter count_logs() (Batch.log_count) returns len(decode()) or raises where decode()
raises. These tests call the extension directly, whatever LOGHUBD_NO_C says."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from loghubd import models
from loghubd.models import Batch
from loghubd.protocol import pb
from tests.unit.fresh_python import fresh_python

fastlog: Any = pytest.importorskip("loghubd._fastlog", reason="built without a C compiler")

Items = list[list[tuple[Any, Any]]]


def items(records: list[dict[str, Any]]) -> Items:
    """Records with their key order: dict equality alone ignores it."""
    return [list(r.items()) for r in records]


def python_items(raw: bytes) -> Items:
    return items(list(models._flatten(pb.LogGroupList.FromString(raw))))


def fast_items(raw: bytes) -> Items:
    return items(fastlog.decode(raw))


def outcome(raw: bytes, fast: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Any]:
    """What Batch.logs() yields (with its key order), or the exception type it raises."""
    monkeypatch.setattr(models, "_fastlog", fastlog if fast else None)
    try:
        return ("ok", items(list(Batch(0, "c", "n", raw, 1).logs())))
    except Exception as e:
        return ("raised", type(e))


# -- hand-built wire bytes ------------------------------------------------------------------


def varint(v: int) -> bytes:
    return pb.encode_varint(v)


def ld(num: int, payload: bytes) -> bytes:
    """A length-delimited field."""
    return varint(num << 3 | 2) + varint(len(payload)) + payload


def vi(num: int, value: int) -> bytes:
    return varint(num << 3) + varint(value)


def f32(num: int, value: int) -> bytes:
    return varint(num << 3 | 5) + value.to_bytes(4, "little")


def f64(num: int, value: int) -> bytes:
    return varint(num << 3 | 1) + value.to_bytes(8, "little")


def content(key: bytes, value: bytes) -> bytes:
    return ld(1, key) + ld(2, value)


# what a log of a group without Topic, Source or tags starts with, after `__time__`
_EMPTY_BASE = [("__topic__", ""), ("__source__", "")]


def one_log_list(log: bytes, group_extra: bytes = b"") -> bytes:
    return ld(1, ld(1, log) + group_extra)


# -- generated LogGroupLists ----------------------------------------------------------------

# A few fixed names so that duplicates, and keys that shadow the record's own fields, happen.
_names = st.sampled_from(["", "a", "b", "level", "__topic__", "__time__", "__tag__:h", "é"])
_text = st.one_of(_names, st.text(max_size=8))
_values = st.one_of(
    _text.map(lambda s: s.encode()),
    st.binary(max_size=8),  # mostly not UTF-8
    st.sampled_from([b"\xff", b"\xed\xa0\x80", b"\xc0\xaf", b"caf\xc3", b"\xf4\x90\x80\x80"]),
)
_u32 = st.integers(0, 2**32 - 1)


# The strategies a composite draws from are made once, here: one built inside it is a new
# object at every draw, which hypothesis validates and labels again each time (most of these
# tests' time went there, not into the checks).
_0_to_4 = st.integers(0, 4)
_maybe_text = st.none() | _text
_tags = st.lists(st.tuples(_text, _text), max_size=3)
_time_ns = st.sampled_from([None, 0]) | _u32
_contents = st.lists(st.tuples(_text, _values), max_size=5)


@st.composite
def log_group_lists(draw: st.DrawFn) -> bytes:
    """A serialized LogGroupList; content values are bytes (the Raw schema), any of them."""
    lgl = pb.LogGroupListRaw()
    for _ in range(draw(_0_to_4)):
        group = lgl.LogGroups.add()
        for name in ("Topic", "Source", "Reserved", "MachineUUID"):
            value = draw(_maybe_text)
            if value is not None:
                setattr(group, name, value)
        for key, value in draw(_tags):
            group.LogTags.add(Key=key, Value=value)
        for _ in range(draw(_0_to_4)):
            log = group.Logs.add(Time=draw(_u32))
            time_ns = draw(_time_ns)
            if time_ns is not None:
                log.Time_ns = time_ns
            for key, value in draw(_contents):
                log.Contents.add(Key=key, Value=value)
    raw: bytes = lgl.SerializeToString()
    return raw


@settings(max_examples=300)
@given(log_group_lists())
def test_same_records_and_key_order_as_the_python_path(raw: bytes) -> None:
    assert fast_items(raw) == python_items(raw)


@given(st.lists(log_group_lists(), min_size=2, max_size=4))
def test_batches_of_repeated_and_changing_keys(raws: list[bytes]) -> None:
    """Keys are reused from log to log when their bytes match: whole lists concatenated
    (a LogGroupList is a repeated field) mix reuse and change."""
    raw = b"".join(raws)
    assert fast_items(raw) == python_items(raw)


# Keys and values from small sets, including ones a record has of its own and values that
# are not UTF-8: consecutive logs then repeat, extend, shorten and reorder each other's keys
# and values, which is what the per-position key and value caches of the C code act on.
_few_keys = st.sampled_from(["a", "b", "level", "__time__", "__tag__:h", "é", "abcdefghij"])
_few_values = st.sampled_from([b"", b"INFO", b"x" * 12, b"\xff", "é".encode(), b"GET /a"])


_1_to_3 = st.integers(1, 3)
_pairs = st.lists(st.tuples(_few_keys, _few_values), max_size=6)


@st.composite
def similar_logs(draw: st.DrawFn) -> bytes:
    """A LogGroupList whose logs draw their keys and values from small sets."""
    lgl = pb.LogGroupListRaw()
    for _ in range(draw(_1_to_3)):
        group = lgl.LogGroups.add(Topic="t")
        if draw(st.booleans()):
            group.LogTags.add(Key="h", Value="v")
        for _ in range(draw(st.integers(1, 8))):
            log = group.Logs.add(Time=1)
            for key, value in draw(_pairs):
                log.Contents.add(Key=key.encode(), Value=value)
    raw: bytes = lgl.SerializeToString()
    return raw


@settings(max_examples=300)
@given(similar_logs())
def test_logs_repeating_each_other_s_keys_and_values(raw: bytes) -> None:
    assert fast_items(raw) == python_items(raw)


_topics = st.sampled_from(["t", "u"])
_tag_values = st.sampled_from(["v", "w"])
_shapes = st.lists(_few_keys, max_size=6)
_changes = st.sampled_from(["same"] * 4 + ["replace", "add", "drop"])
_times = st.sampled_from([1, 2])
_shaped_time_ns = st.sampled_from([None, None, 0, 7, 9])


@st.composite
def shaped_logs(draw: st.DrawFn) -> bytes:
    """A LogGroupList whose groups' logs mostly have one key sequence (its "shape", which may
    repeat a key), so the C code builds most records as copies of the one before; some logs
    change a key at any position, gain or lose one, or gain or lose a Time_ns."""
    lgl = pb.LogGroupListRaw()
    for _ in range(draw(_1_to_3)):
        group = lgl.LogGroups.add(Topic=draw(_topics))
        if draw(st.booleans()):
            group.LogTags.add(Key="h", Value=draw(_tag_values))
        shape = draw(_shapes)
        for _ in range(draw(st.integers(1, 30))):
            keys = list(shape)
            change = draw(_changes)
            if change == "replace" and keys:
                keys[draw(st.integers(0, len(keys) - 1))] = draw(_few_keys)
            elif change == "add":
                keys.insert(draw(st.integers(0, len(keys))), draw(_few_keys))
            elif change == "drop" and keys:
                del keys[draw(st.integers(0, len(keys) - 1))]
            log = group.Logs.add(Time=draw(_times))
            time_ns = draw(_shaped_time_ns)
            if time_ns is not None:
                log.Time_ns = time_ns
            for key in keys:
                log.Contents.add(Key=key.encode(), Value=draw(_few_values))
    raw: bytes = lgl.SerializeToString()
    return raw


@settings(max_examples=400)
@given(shaped_logs())
def test_logs_of_one_shape_with_changes_at_any_position(raw: bytes) -> None:
    assert fast_items(raw) == python_items(raw)


@pytest.mark.parametrize("alternating", [0, 2, 17, 40])
def test_logs_of_alternating_shapes_then_one_shape(alternating: int) -> None:
    """After misses in a row the C code tries the template only now and then: the records are
    the same whichever way each is built."""
    group = pb.LogGroup(Topic="t")
    for i in range(alternating + 20):
        log = group.Logs.add(Time=i)
        log.Contents.add(Key="a", Value=str(i))
        log.Contents.add(Key="b" if i >= alternating or i % 2 else "c", Value="v")
    raw = pb.LogGroupList(LogGroups=[group, group]).SerializeToString()
    assert fast_items(raw) == python_items(raw)


@pytest.mark.parametrize(
    ("keys", "first", "second"),
    [
        # A key repeated in a log: the later value wins, and an earlier one that changed
        # while the later did not must not show through the copy.
        pytest.param(["a", "a"], ["x", "y"], ["z", "y"], id="repeated key, first changes"),
        pytest.param(["a", "b", "a"], ["x", "1", "y"], ["z", "1", "y"], id="repeated apart"),
        # A content named like a field of the record itself overwrites it.
        pytest.param(["__time__", "a"], ["5", "x"], ["6", "x"], id="content __time__"),
        pytest.param(["__topic__"], ["x"], ["x"], id="content __topic__, unchanged"),
        pytest.param(["__tag__:h"], ["x"], ["y"], id="content shadows a tag"),
        pytest.param(["a", "b"], ["x", "y"], ["x", "y"], id="nothing changes"),
    ],
)
def test_values_kept_from_the_record_before_are_the_right_ones(
    keys: list[str], first: list[str], second: list[str]
) -> None:
    """A record built as a copy of the one before keeps the values that did not change; that
    must hold when the record's keys are not all distinct, too."""
    group = pb.LogGroup(Topic="t")
    group.LogTags.add(Key="h", Value="tag")
    for time, values in ((7, first), (7, second), (8, second), (8, first)):
        log = group.Logs.add(Time=time)
        for key, value in zip(keys, values, strict=True):
            log.Contents.add(Key=key, Value=value)
    raw = pb.LogGroupList(LogGroups=[group]).SerializeToString()
    assert fast_items(raw) == python_items(raw)


def test_records_built_as_copies_are_independent_dicts() -> None:
    group = pb.LogGroup(Topic="t")
    for i in range(4):
        log = group.Logs.add(Time=1)
        log.Contents.add(Key="level", Value="INFO")
        log.Contents.add(Key="msg", Value=f"m{i}")
    records = fastlog.decode(pb.LogGroupList(LogGroups=[group]).SerializeToString())
    assert len({id(r) for r in records}) == 4
    records[1]["msg"] = "changed"
    records[1]["new"] = "x"
    assert [r["msg"] for r in records] == ["m0", "changed", "m2", "m3"]
    assert ["new" in r for r in records] == [False, True, False, False]


@given(
    st.lists(st.lists(st.tuples(_few_keys, _few_values), max_size=6), min_size=1, max_size=8),
    st.integers(0, 100),
    st.sampled_from([b"\xff", b"a\xc3", b"\xed\xa0\x80"]),
)
def test_count_checks_a_key_that_is_not_the_one_before_it(
    logs: list[list[tuple[str, bytes]]], at: int, bad: bytes
) -> None:
    """count_logs() skips the UTF-8 check of a key equal to the previous log's at the same
    position: a key that is not UTF-8 among cached ones is still refused."""
    keys = [[k.encode() for k, _ in log] for log in logs]
    positions = [(i, j) for i, log in enumerate(keys) for j in range(len(log))]
    assume(positions)
    i, j = positions[at % len(positions)]
    keys[i][j] = bad
    group = b"".join(
        ld(1, vi(1, 1) + b"".join(ld(2, content(k, v)) for k, (_, v) in zip(ks, log, strict=True)))
        for ks, log in zip(keys, logs, strict=True)
    )
    assert check_count(ld(1, group)) is None


def test_realistic_group_and_key_reuse() -> None:
    group = pb.LogGroup(Topic="t", Source="10.0.0.1")
    group.LogTags.add(Key="host", Value="web-1")
    for i in range(5):
        log = group.Logs.add(Time=1700000000 + i // 2, Time_ns=i)
        log.Contents.add(Key="level", Value="INFO")
        log.Contents.add(Key="msg" if i != 3 else "msh", Value=f"m{i}")
    raw = pb.LogGroupList(LogGroups=[group, group]).SerializeToString()
    records = fastlog.decode(raw)
    assert items(records) == python_items(raw)
    assert len(records) == 10
    # the same key object from log to log (and group to group), a new one where bytes differ
    level = [next(k for k in r if k == "level") for r in records]
    assert all(k is level[0] for k in level)
    assert "msh" in records[3] and "msg" in records[4]


def test_values_that_are_not_utf8_are_kept_with_surrogateescape() -> None:
    raw = one_log_list(vi(1, 5) + ld(2, content(b"v", b"\xff\xfed")) + ld(2, content(b"w", b"ok")))
    assert fastlog.decode(raw) == [
        {"__time__": 5, "__topic__": "", "__source__": "", "v": "\udcff\udcfed", "w": "ok"}
    ]
    assert fast_items(raw) == python_items(raw)


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(one_log_list(ld(2, content(b"\xff", b"v"))), id="content key"),
        pytest.param(one_log_list(b"", ld(3, b"t\xff")), id="topic"),
        pytest.param(one_log_list(b"", ld(4, b"\xc0\xaf")), id="source"),
        pytest.param(one_log_list(b"", ld(6, ld(1, b"h\xff") + ld(2, b"v"))), id="tag key"),
        pytest.param(
            one_log_list(b"", ld(6, ld(1, b"h") + ld(2, b"\xed\xa0\x80"))), id="tag value"
        ),
    ],
)
def test_other_strings_that_are_not_utf8_leave_it_to_the_python_path(
    raw: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValueError, match="utf-8"):
        fastlog.decode(raw)
    with pytest.raises(ValueError, match="not UTF-8"):
        fastlog.count_logs(raw)
    assert outcome(raw, True, monkeypatch) == outcome(raw, False, monkeypatch)
    assert Batch(0, "c", "n", raw, 1).log_count == 1  # counted by the Python path


def test_reserved_and_machine_uuid_are_never_read() -> None:
    raw = one_log_list(vi(1, 1), ld(2, b"\xff") + ld(5, b"\xfe"))
    assert fast_items(raw) == python_items(raw) == [[("__time__", 1), *_EMPTY_BASE]]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param(
            one_log_list(vi(1, 7) + vi(1, 9) + f32(4, 1) + f32(4, 2)),
            [("__time__", 9), ("__time_ns_part__", 2), *_EMPTY_BASE],
            id="last Time and Time_ns win",
        ),
        pytest.param(
            one_log_list(vi(1, 2**40 + 3)),
            [("__time__", 3), *_EMPTY_BASE],
            id="uint32 Time keeps the low 32 bits",
        ),
        pytest.param(
            one_log_list(f32(4, 0) + vi(1, 1)),
            [("__time__", 1), *_EMPTY_BASE],
            id="Time_ns 0 is left out",
        ),
        pytest.param(
            one_log_list(ld(2, ld(2, b"v"))),
            [("__time__", 0), *_EMPTY_BASE, ("", "v")],
            id="missing required fields are defaults",
        ),
        pytest.param(
            one_log_list(ld(2, content(b"k", b"1") + ld(1, b"j") + ld(2, b"2"))),
            [("__time__", 0), *_EMPTY_BASE, ("j", "2")],
            id="last Key and Value win",
        ),
        pytest.param(
            one_log_list(vi(1, 1), ld(3, b"a") + ld(4, b"s") + ld(3, b"b")),
            [("__time__", 1), ("__topic__", "b"), ("__source__", "s")],
            id="last Topic wins, even after the logs",
        ),
        pytest.param(
            one_log_list(
                ld(2, content(b"k", b"1"))
                + ld(2, content(b"__topic__", b"x"))
                + ld(2, content(b"k", b"2")),
                ld(3, b"t") + ld(6, content(b"h", b"1")) + ld(6, content(b"h", b"2")),
            ),
            [
                ("__time__", 0),
                ("__topic__", "x"),
                ("__source__", ""),
                ("__tag__:h", "2"),
                ("k", "2"),
            ],
            id="duplicate keys overwrite in place",
        ),
        pytest.param(
            # overlong but valid: a 3-byte tag, a 6-byte length, a 10-byte varint whose last
            # byte carries bits beyond 64 (upb drops them)
            one_log_list(
                b"\x88\x80\x00\x05"
                + b"\x12\x85\x80\x80\x80\x80\x00"
                + content(b"k", b"")
                + b"\x08\x86"
                + b"\x80" * 8
                + b"\x7f"
            ),
            [("__time__", 6), *_EMPTY_BASE, ("k", "")],
            id="overlong varints are accepted the way upb accepts them",
        ),
    ],
)
def test_protobuf_rules(raw: bytes, expected: list[tuple[str, Any]]) -> None:
    assert fast_items(raw) == python_items(raw) == [expected]


UNKNOWN = vi(15, 300) + f64(16, 1) + ld(17, b"xyz") + f32(18, 5) + vi(2**29 - 1, 1)


def test_unknown_fields_are_skipped_at_every_level() -> None:
    tag = ld(6, UNKNOWN + content(b"h", b"v") + UNKNOWN)
    log = vi(1, 1) + ld(2, UNKNOWN + content(b"k", b"v") + UNKNOWN) + UNKNOWN + f32(4, 3)
    raw = UNKNOWN + ld(1, UNKNOWN + ld(1, log) + UNKNOWN + ld(3, b"t") + tag) + UNKNOWN
    expected = [
        [
            ("__time__", 1),
            ("__time_ns_part__", 3),
            ("__topic__", "t"),
            ("__source__", ""),
            ("__tag__:h", "v"),
            ("k", "v"),
        ]
    ]
    assert fast_items(raw) == python_items(raw) == expected


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(vi(1, 5) + f32(1, 5) + f64(1, 5), id="LogGroups not length-delimited"),
        pytest.param(ld(1, vi(1, 5) + vi(3, 1) + f32(4, 1) + vi(6, 2)), id="group fields"),
        pytest.param(
            one_log_list(
                ld(1, vi(1, 5)) + f32(1, 5) + vi(4, 9) + ld(4, b"\0" * 4) + vi(2, 1) + f32(2, 1)
            ),
            id="log fields",
        ),
        pytest.param(
            one_log_list(ld(2, vi(1, 1) + f32(2, 1) + content(b"k", b"v"))), id="content fields"
        ),
        pytest.param(
            one_log_list(b"", ld(6, vi(1, 1) + f64(2, 1) + content(b"h", b"v"))), id="tag fields"
        ),
    ],
)
def test_known_fields_with_another_wire_type_are_skipped(raw: bytes) -> None:
    assert fast_items(raw) == python_items(raw)


@pytest.mark.parametrize(
    ("raw", "upb_accepts"),
    [
        pytest.param(b"\x0a\x05\x0a\x01", False, id="length past the end"),
        pytest.param(ld(1, b"\x0a\x05\x0a\x01") + b"\x00" * 4, False, id="past the submessage"),
        pytest.param(vi(2, 0)[:1] + b"\xff" * 10 + b"\x01", False, id="11-byte varint"),
        # the Log's length runs one byte past its group, into a valid top-level field
        pytest.param(b"\x0a\x03\x0a\x02\x08\x08\x07", False, id="one past the submessage"),
        pytest.param(b"\x00\x00", False, id="field number 0"),
        pytest.param(b"\x88\x80\x80\x80\x80\x00\x00", False, id="6-byte tag"),
        pytest.param(b"\xf8\xff\xff\xff\x1f\x00", False, id="tag beyond 32 bits"),
        pytest.param(b"\x16", False, id="wire type 6"),
        pytest.param(b"\x1c", False, id="end group"),
        pytest.param(one_log_list(f64(9, 1)[:5]), False, id="truncated fixed64"),
        pytest.param(one_log_list(f32(4, 1)[:3]), False, id="truncated fixed32"),
        # upb skips unknown groups; we refuse them and the Python path reads them
        pytest.param(b"\x13\x08\x01\x14" + one_log_list(vi(1, 1)), True, id="unknown group"),
    ],
)
def test_malformed_bytes_raise_value_error_and_the_python_path_decides(
    raw: bytes, upb_accepts: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValueError, match="malformed"):
        fastlog.decode(raw)
    with pytest.raises(ValueError, match="malformed"):
        fastlog.count_logs(raw)
    python = outcome(raw, False, monkeypatch)
    assert python[0] == ("ok" if upb_accepts else "raised")
    assert outcome(raw, True, monkeypatch) == python


def check_count(raw: bytes) -> int | None:
    """count_logs() refuses (ValueError) exactly what decode() refuses, and otherwise counts
    decode()'s records, which is also upb's count of the Logs (the Raw schema parses the
    bytes). Returns the count, None where refused."""
    try:
        decoded: int | None = len(fastlog.decode(raw))
    except ValueError:
        decoded = None
    try:
        count: int | None = fastlog.count_logs(raw)
    except ValueError:
        count = None
    assert count == decoded
    if count is not None:
        assert sum(len(g.Logs) for g in pb.LogGroupListRaw.FromString(raw).LogGroups) == count
    return count


def check_robust(raw: bytes) -> None:
    """Either the Python path's records, or ValueError (never a crash, never different); and
    decode_chunk() in chunks of any size has the same outcome as decode(), and count_logs()
    the same count."""
    check_count(raw)
    try:
        fast: tuple[str, Any] = ("ok", fast_items(raw))
    except ValueError as e:
        fast = ("raised", type(e))
    for max_logs in (1, 2, 7):
        try:
            chunked: tuple[str, Any] = ("ok", items(chunks(raw, max_logs)[0]))
        except ValueError as e:
            chunked = ("raised", type(e))
        assert chunked == fast
    if fast[0] == "ok":
        assert fast[1] == python_items(raw)


_fuzz = settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])


@_fuzz
@given(st.binary(max_size=64))
def test_arbitrary_bytes(raw: bytes) -> None:
    check_robust(raw)


@_fuzz
@given(log_group_lists(), st.data())
def test_truncated_and_mutated_encodings(raw: bytes, data: st.DataObject) -> None:
    check_robust(raw[: data.draw(st.integers(0, len(raw)))])
    if raw:
        mutated = bytearray(raw)
        for _ in range(data.draw(st.integers(1, 3))):
            i = data.draw(st.integers(0, len(raw) - 1))
            mutated[i] = data.draw(st.integers(0, 255))
        check_robust(bytes(mutated))
        i = data.draw(st.integers(0, len(raw)))
        check_robust(raw[:i] + data.draw(st.binary(min_size=1, max_size=4)) + raw[i:])


# -- decode_chunk ---------------------------------------------------------------------------


def chunks(raw: bytes, max_logs: int) -> tuple[list[dict[str, Any]], list[list[dict[str, Any]]]]:
    """Every record from repeated decode_chunk() calls, and the chunks, checking the offsets."""
    offset, records, parts = 0, [], []
    while offset < len(raw):
        part, next_offset = fastlog.decode_chunk(raw, offset, max_logs)
        assert offset < next_offset <= len(raw)
        offset = next_offset
        records += part
        parts.append(part)
    assert offset == len(raw)
    return records, parts


@settings(max_examples=300)
@given(st.lists(log_group_lists(), min_size=1, max_size=4), st.integers(1, 50))
def test_chunks_add_up_to_decode(raws: list[bytes], max_logs: int) -> None:
    raw = b"".join(raws)
    try:
        whole = fastlog.decode(raw)
    except ValueError as e:
        with pytest.raises(type(e)):
            chunks(raw, max_logs)
        return
    records, parts = chunks(raw, max_logs)
    assert items(records) == items(whole)
    # whole groups until at least max_logs records: only the last chunk may hold fewer
    assert all(len(part) >= max_logs for part in parts[:-1])


def test_chunks_end_after_whole_groups() -> None:
    group = pb.LogGroup(Topic="t")
    for i in range(3):
        group.Logs.add(Time=i).Contents.add(Key="k", Value=str(i))
    one = group.SerializeToString()
    raw = pb.frame_log_groups([one] * 3)
    first, offset = fastlog.decode_chunk(raw, 0, 4)  # 4 logs: two whole groups
    assert [r["k"] for r in first] == ["0", "1", "2"] * 2
    assert offset == 2 * len(ld(1, one))
    last, end = fastlog.decode_chunk(raw, offset, 4)
    assert [r["k"] for r in last] == ["0", "1", "2"] and end == len(raw)
    assert fastlog.decode_chunk(raw, end, 4) == ([], len(raw))
    assert fastlog.decode_chunk(b"", 0, 1) == ([], 0)
    # fields after the last group are read (and checked) by the call that reaches them
    assert fastlog.decode_chunk(raw + UNKNOWN, offset, 4) == (last, len(raw + UNKNOWN))
    with pytest.raises(ValueError, match="malformed"):
        fastlog.decode_chunk(raw + b"\x16", offset, 4)
    assert fastlog.decode_chunk(raw + b"\x16", 0, 4)[1] == offset  # not reached yet


@pytest.mark.parametrize(("offset", "max_logs"), [(-1, 1), (7, 1), (2**40, 1), (0, 0), (0, -1)])
def test_chunk_offset_outside_the_bytes_or_no_max_raises_value_error(
    offset: int, max_logs: int
) -> None:
    raw = one_log_list(vi(1, 1))
    assert len(raw) == 6
    with pytest.raises(ValueError, match=r"^(offset|max_logs) "):
        fastlog.decode_chunk(raw, offset, max_logs)


# -- count_logs -----------------------------------------------------------------------------


@settings(max_examples=300)
@given(st.lists(log_group_lists(), max_size=4))
def test_count_logs_counts_every_log_of_every_group(raws: list[bytes]) -> None:
    """Valid lists (keys, tags, topics in UTF-8; values anything) are always counted."""
    raw = b"".join(raws)
    upb = sum(len(g.Logs) for g in pb.LogGroupListRaw.FromString(raw).LogGroups)
    assert fastlog.count_logs(raw) == upb == len(python_items(raw))


def test_count_logs_counts_logs_not_groups_or_contents() -> None:
    group = pb.LogGroup(Topic="t")
    group.LogTags.add(Key="host", Value="h")
    for i in range(7):
        log = group.Logs.add(Time=i)
        for j in range(i):  # 0 to 6 contents
            log.Contents.add(Key=f"k{j}", Value="v")
    one = group.SerializeToString()
    empty = pb.LogGroup(Topic="t").SerializeToString()
    assert fastlog.count_logs(pb.frame_log_groups([one])) == 7
    assert fastlog.count_logs(pb.frame_log_groups([empty, one, empty, one])) == 14
    assert fastlog.count_logs(pb.frame_log_groups([empty] * 3)) == 0
    assert fastlog.count_logs(ld(1, b"") * 5) == 0  # groups with nothing at all
    assert fastlog.count_logs(b"") == 0
    # every Log counts, even an empty one (all its fields missing)
    assert fastlog.count_logs(ld(1, ld(1, b"") * 3 + ld(3, b"t")) + ld(1, ld(1, b""))) == 4


def test_count_logs_skips_unknown_fields_at_every_level() -> None:
    tag = ld(6, UNKNOWN + content(b"h", b"v") + UNKNOWN)
    log = vi(1, 1) + ld(2, UNKNOWN + content(b"k", b"v") + UNKNOWN) + UNKNOWN + f32(4, 3)
    group = ld(1, UNKNOWN + ld(1, log) + UNKNOWN + ld(1, log) + ld(3, b"t") + tag)
    raw = UNKNOWN + group + UNKNOWN + group + UNKNOWN
    assert fastlog.count_logs(raw) == 4 == check_count(raw)
    # fields 1 (Logs / LogGroups) with another wire type are not messages: not counted
    raw = vi(1, 5) + ld(1, vi(1, 5) + f32(1, 5) + ld(1, vi(1, 1))) + f64(1, 5)
    assert fastlog.count_logs(raw) == 1 == check_count(raw)


@pytest.mark.parametrize(
    ("raw", "upb_count"),
    [
        pytest.param(b"\x80", None, id="truncated tag varint"),
        pytest.param(b"\x0a\x80", None, id="truncated length varint"),
        pytest.param(one_log_list(b"\x08\xff\xff"), None, id="truncated Time varint"),
        pytest.param(one_log_list(ld(2, b"\x0a\x81")), None, id="truncated key length varint"),
        pytest.param(one_log_list(b"", ld(6, b"\x12\x80")), None, id="truncated tag value length"),
        pytest.param(one_log_list(ld(2, b"\x0a\x05ab")), None, id="key past its content"),
        pytest.param(one_log_list(b"", ld(6, b"\x00")), None, id="field 0 in a tag"),
        pytest.param(one_log_list(vi(1, 1)) + b"\x0a", None, id="list ends after a tag"),
        # upb skips unknown groups; we refuse them and the Python path counts
        pytest.param(one_log_list(ld(2, b"\x13\x14")), 1, id="group in a content"),
    ],
)
def test_count_logs_refuses_malformed_bytes_at_every_level(
    raw: bytes, upb_count: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValueError, match="malformed"):
        fastlog.count_logs(raw)
    with pytest.raises(ValueError, match="malformed"):
        fastlog.decode(raw)
    monkeypatch.setattr(models, "_fastlog", fastlog)
    if upb_count is None:
        with pytest.raises(pb.DecodeError):
            pb.LogGroupListRaw.FromString(raw)
        with pytest.raises(pb.DecodeError):  # as without the extension
            Batch(0, "c", "n", raw, 1).log_count  # noqa: B018
    else:
        assert Batch(0, "c", "n", raw, 1).log_count == upb_count


# Strings placed where decode() makes them (strictly: keys, tags, topic, source), where it
# makes them with surrogateescape (content values), and where it never reads them. A strict
# string is followed by a byte that could continue a UTF-8 sequence (the tag of an unknown
# field 16 starts with 0x80): a check that read past the string's end could accept it.
_NEXT = vi(16, 0)
_STRICT = {
    "content key": lambda s: one_log_list(ld(2, ld(1, s) + _NEXT + ld(2, b"v"))),
    "tag key": lambda s: one_log_list(b"", ld(6, ld(1, s) + _NEXT + ld(2, b"v"))),
    "tag value": lambda s: one_log_list(b"", ld(6, ld(1, b"h") + ld(2, s) + _NEXT)),
    "topic": lambda s: one_log_list(b"", ld(3, s) + _NEXT),
    "source": lambda s: one_log_list(b"", ld(4, s) + _NEXT),
}
_LENIENT = {
    "content value": lambda s: one_log_list(ld(2, content(b"k", s))),
    "reserved": lambda s: one_log_list(b"", ld(2, s)),
    "machine uuid": lambda s: one_log_list(b"", ld(5, s)),
    "unknown field": lambda s: one_log_list(ld(9, s), ld(9, s)),
}
# the edges of well-formed UTF-8, on both sides (CPython's strict decoder is the judge)
_UTF8_EDGES = [
    b"\x7f",
    b"\x80",
    b"\xbf",
    b"\xc0\x80",
    b"\xc1\xbf",
    b"\xc2\x80",
    b"\xdf\xbf",
    b"\xe0\x9f\xbf",
    b"\xe0\xa0\x80",
    b"\xed\x9f\xbf",
    b"\xed\xa0\x80",
    b"\xed\xbf\xbf",
    b"\xee\x80\x80",
    b"\xef\xbf\xbf",
    b"\xf0\x8f\xbf\xbf",
    b"\xf0\x90\x80\x80",
    b"\xf4\x8f\xbf\xbf",
    b"\xf4\x90\x80\x80",
    b"\xf5\x80\x80\x80",
    b"\xff",
    b"\xe2\x82",
    b"\xf0\x9f\x98",
    b"\xe2\x28\xa1",
    b"\xf0\x9f\x98\x80",
]
_pieces = st.one_of(
    st.text(max_size=4).map(str.encode), st.binary(max_size=3), st.sampled_from(_UTF8_EDGES)
)
_strings = st.lists(_pieces, max_size=4).map(b"".join)


def is_utf8(s: bytes) -> bool:
    try:
        s.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@settings(max_examples=500)
@given(st.sampled_from(sorted(_STRICT.keys() | _LENIENT.keys())), _strings)
def test_count_logs_refuses_exactly_the_strings_decode_refuses(where: str, s: bytes) -> None:
    raw = (_STRICT | _LENIENT)[where](s)
    expected = 1 if where in _LENIENT or is_utf8(s) else None
    assert check_count(raw) == expected


@pytest.mark.parametrize(
    ("raw", "count"),
    [
        pytest.param(one_log_list(b"", ld(3, b"\xff") + ld(3, b"t")), 1, id="earlier topic"),
        pytest.param(one_log_list(b"", ld(3, b"t") + ld(3, b"\xff")), None, id="last topic"),
        pytest.param(one_log_list(b"", ld(4, b"\xff") + ld(4, b"s")), 1, id="earlier source"),
        pytest.param(
            one_log_list(ld(2, content(b"\xff", b"v") + ld(1, b"k"))), 1, id="earlier key"
        ),
        pytest.param(
            one_log_list(ld(2, content(b"k", b"v") + ld(1, b"\xff"))), None, id="last key"
        ),
        pytest.param(
            one_log_list(b"", ld(6, content(b"h", b"\xff") + ld(2, b"v"))), 1, id="earlier value"
        ),
        pytest.param(
            one_log_list(b"", ld(3, b"\xe2\x82") + _NEXT),  # e2 82 80 would be valid
            None,
            id="cut sequence, its continuation outside the string",
        ),
        # a key, tag or topic with another wire type is skipped, never decoded
        pytest.param(one_log_list(ld(2, vi(1, 0xFF) + ld(1, b"k"))), 1, id="varint key"),
    ],
)
def test_count_logs_checks_the_strings_decode_makes_and_only_those(
    raw: bytes, count: int | None
) -> None:
    assert check_count(raw) == count


@_fuzz
@given(st.lists(log_group_lists(), min_size=1, max_size=3), st.data())
def test_count_logs_on_truncated_and_bit_flipped_encodings(
    raws: list[bytes], data: st.DataObject
) -> None:
    raw = b"".join(raws)
    check_count(raw[: data.draw(st.integers(0, len(raw)))])
    if raw:
        flipped = bytearray(raw)
        for _ in range(data.draw(st.integers(1, 4))):
            bit = data.draw(st.integers(0, 8 * len(raw) - 1))
            flipped[bit // 8] ^= 1 << (bit % 8)
        check_count(bytes(flipped))


def test_count_logs_takes_any_bytes_like_object_and_nothing_else() -> None:
    raw = pb.frame_log_groups([ld(1, vi(1, 1)) * 2])
    assert fastlog.count_logs(raw) == 2
    assert fastlog.count_logs(bytearray(raw)) == fastlog.count_logs(memoryview(raw)) == 2
    with pytest.raises(TypeError):
        fastlog.count_logs("not bytes")


def test_batch_logs_is_lazy_and_counts_from_the_c_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(models, "_fastlog", fastlog)
    group = pb.LogGroup(Topic="t")
    for i in range(3):
        group.Logs.add(Time=i).Contents.add(Key="k", Value=str(i))
    raw = pb.frame_log_groups([group.SerializeToString()])
    batch = Batch(0, "c", "n", raw, 1)
    logs = batch.logs()
    assert "log_count" not in batch._cache  # nothing decoded before the first next()
    assert next(logs)["k"] == "0"
    assert batch._cache["log_count"] == 3
    assert [r["k"] for r in logs] == ["1", "2"]
    assert batch.log_count == 3
    assert Batch(0, "c", "n", raw, 1).log_count == 3  # without logs(): count_logs()


def test_loghubd_no_c_disables_the_extension() -> None:
    code = "import loghubd.models as m; print(m._fastlog is None)"

    def run(**env: str) -> str:
        return fresh_python(code, **env)

    assert run(LOGHUBD_NO_C="1") == "True"
    assert run() == run(LOGHUBD_NO_C="0") == "False"
