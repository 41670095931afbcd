"""loghubd._fastjsonl, the C encoder behind Batch.jsonl(): its JSON lines are byte for byte
`json.dumps(record) + "\\n"` of the records the Python path makes (upb parse + models._flatten,
what the `jsonl` processor wrote before it existed), or it raises ValueError and Batch.jsonl()
takes the Python twin. These tests call the extension directly, whatever LOGHUBD_NO_C says."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loghubd import models
from loghubd.models import Batch
from loghubd.protocol import pb
from tests.unit.fresh_python import fresh_python
from tests.unit.test_fastlog import (
    content,
    ld,
    log_group_lists,
    one_log_list,
    similar_logs,
    vi,
)

fastjsonl: Any = pytest.importorskip("loghubd._fastjsonl", reason="built without a C compiler")


def reference(raw: bytes) -> bytes:
    """What the `jsonl` processor wrote before this view: json.dumps per record of the Python
    path (the UTF-8 schema, the Raw one where a value is not UTF-8)."""
    with_c, models._fastlog = models._fastlog, None
    try:
        return "".join(json.dumps(r) + "\n" for r in Batch(0, "c", "n", raw, 1).logs()).encode()
    finally:
        models._fastlog = with_c


def encode(raw: bytes, max_bytes: int = 1 << 30) -> bytes:
    """Every chunk of encode_chunk() from the start, checking offsets and log counts."""
    offset, out, logs = 0, [], 0
    while offset < len(raw):
        data, next_offset, n = fastjsonl.encode_chunk(raw, offset, max_bytes)
        assert offset < next_offset <= len(raw)
        assert data.count(b"\n") == n
        offset = next_offset
        out.append(data)
        logs += n
    return b"".join(out)


def written(raw: bytes, max_bytes: int) -> bytes:
    """Every chunk of write_chunk() from the start, into a memory file: what it wrote."""
    fd = os.memfd_create("jsonl")
    try:
        offset, total = 0, 0
        while offset < len(raw):
            size, next_offset, n = fastjsonl.write_chunk(raw, offset, max_bytes, fd)
            assert offset < next_offset <= len(raw) and size >= n
            offset, total = next_offset, total + size
        assert os.lseek(fd, 0, os.SEEK_CUR) == total
        os.lseek(fd, 0, os.SEEK_SET)
        return os.read(fd, total + 1)
    finally:
        os.close(fd)


def outcome(raw: bytes, fast: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Any]:
    """Batch.jsonl() with or without the extension, or the exception type it raises."""
    monkeypatch.setattr(models, "_fastjsonl", fastjsonl if fast else None)
    try:
        return ("ok", Batch(0, "c", "n", raw, 1).jsonl())
    except Exception as e:
        return ("raised", type(e))


def check(raw: bytes) -> None:
    """The C output equals the reference, or C refuses (ValueError) where decode() refuses."""
    try:
        expected: bytes | None = reference(raw)
    except Exception:
        expected = None
    try:
        fast: bytes | None = encode(raw)
    except ValueError:
        fast = None
    if fast is not None:
        assert fast == expected
        for max_bytes in (1, 100, 4096):
            assert encode(raw, max_bytes) == fast
            assert written(raw, max_bytes) == fast  # the same bytes, straight to a file
    else:
        with pytest.raises(ValueError, match=r"malformed|not UTF-8"):
            written(raw, 1 << 30)
    try:
        import loghubd._fastlog as fastlog

        fastlog.decode(raw)
        accepted = True
    except ValueError:
        accepted = False
    assert (fast is not None) == accepted  # refuses exactly what the dict decoder refuses


# -- generated lists: unicode, invalid UTF-8, shadowing and repeated keys ------------------


@settings(max_examples=400)
@given(log_group_lists())
def test_same_bytes_as_json_dumps_of_the_python_records(raw: bytes) -> None:
    check(raw)


_unicode = st.text(st.characters(codec="utf-8"), max_size=20)
_bytes_values = st.one_of(_unicode.map(str.encode), st.binary(max_size=12))


@settings(max_examples=300)
@given(similar_logs())
def test_logs_repeating_each_other_s_keys(raw: bytes) -> None:
    """The key of the previous log at the same position is reused (its text and its checks:
    UTF-8, no repeat, no clash with the record's own keys) only when it still holds."""
    check(raw)


def test_a_repeat_among_keys_cached_from_different_logs() -> None:
    """Log 2 leaves b at position 0 of the key cache and c from log 1 at 2: log 3's keys b, b
    are each the cached key of their position, yet repeat; then b, c, a are all new again."""
    group = pb.LogGroup(Topic="t")
    for keys in (["a", "b", "c"], ["b"], ["b", "b"], ["b", "c", "a"], ["b", "c"], ["b", "__x__y"]):
        log = group.Logs.add(Time=1)
        for i, k in enumerate(keys):
            log.Contents.add(Key=k, Value=str(i))
    raw = pb.frame_log_groups([group.SerializeToString()])
    check(raw)
    lines = encode(raw).splitlines()
    assert lines[2] == b'{"__time__": 1, "__topic__": "t", "__source__": "", "b": "1"}'


_0_to_3 = st.integers(0, 3)
_u32 = st.integers(0, 2**32 - 1)
_wide_tags = st.lists(st.tuples(_unicode, _unicode), max_size=40)
_wide_contents = st.lists(st.tuples(_unicode, _bytes_values), max_size=40)


@st.composite
def wide_lists(draw: st.DrawFn) -> bytes:
    """Empty groups, many tags, many contents, any unicode, any bytes in values."""
    lgl = pb.LogGroupListRaw()
    for _ in range(draw(_0_to_3)):
        group = lgl.LogGroups.add(Topic=draw(_unicode), Source=draw(_unicode))
        for k, v in draw(_wide_tags):
            group.LogTags.add(Key=k, Value=v)
        for _ in range(draw(_0_to_3)):
            log = group.Logs.add(Time=draw(_u32))
            if draw(st.booleans()):
                log.Time_ns = draw(_u32)
            for k, v in draw(_wide_contents):
                log.Contents.add(Key=k, Value=v)
    raw: bytes = lgl.SerializeToString()
    return raw


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(wide_lists())
def test_unicode_many_tags_many_fields_and_empty_groups(raw: bytes) -> None:
    check(raw)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(b"x" * (3 << 20), id="3 MiB ascii"),
        pytest.param('é😀\n\x00"\\'.encode() * 100_000, id="escapes"),
        pytest.param(bytes(range(256)) * 4000, id="every byte"),
    ],
)
def test_huge_values(value: bytes) -> None:
    raw = one_log_list(vi(1, 7) + ld(2, content(b"big", value)) + ld(2, content(b"k", b"v")))
    check(raw)


def test_every_control_character_and_del() -> None:
    value = bytes(range(0x20)) + b'\x7f"\\/'
    raw = one_log_list(vi(1, 1) + ld(2, content(value, value)))
    check(raw)
    assert (
        encode(raw)
        == (
            json.dumps(
                {"__time__": 1, "__topic__": "", "__source__": "", value.decode(): value.decode()}
            )
            + "\n"
        ).encode()
    )


def test_keys_shadowing_the_record_own_keys_keep_their_place() -> None:
    group = pb.LogGroup(Topic="t", Source="s")
    group.LogTags.add(Key="h", Value="1")
    group.LogTags.add(Key="h", Value="2")
    log = group.Logs.add(Time=3)
    for k, v in [
        ("a", "1"),
        ("__time__", "x"),
        ("__tag__:h", "y"),
        ("a", "2"),
        ("__time_ns_part__", "z"),
        ("__source__", ""),
    ]:
        log.Contents.add(Key=k, Value=v)
    raw = pb.frame_log_groups([group.SerializeToString()])
    check(raw)
    assert encode(raw) == (
        b'{"__time__": "x", "__topic__": "t", "__source__": "", "__tag__:h": "y", "a": "2", '
        b'"__time_ns_part__": "z"}\n'
    )


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(one_log_list(ld(2, content(b"\xff", b"v"))), id="content key"),
        pytest.param(one_log_list(b"", ld(3, b"t\xff")), id="topic"),
        pytest.param(one_log_list(b"", ld(6, ld(1, b"h") + ld(2, b"\xed\xa0\x80"))), id="tag"),
        pytest.param(b"\x0a\x05\x0a\x03\x08", id="truncated"),
    ],
)
def test_refused_bytes_take_the_python_path_with_the_same_outcome(
    raw: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValueError, match=r"malformed|not UTF-8"):
        fastjsonl.encode_chunk(raw, 0, 100)
    assert outcome(raw, True, monkeypatch) == outcome(raw, False, monkeypatch)


def test_a_refusal_after_good_groups_resumes_in_python_after_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    good = ld(1, ld(1, vi(1, 1) + ld(2, content(b"k", b"v"))) * 3)
    empty_group = bytes([9 << 3 | 3, 9 << 3 | 4])  # legal protobuf, left to Python by C
    bad = ld(1, ld(1, vi(1, 2) + empty_group + ld(2, content(b"k", b"w"))))
    raw = good * 2 + bad + good
    monkeypatch.setattr(models, "_fastjsonl", fastjsonl)
    chunks = list(Batch(0, "c", "n", raw, 1).jsonl_chunks(1))
    assert b"".join(chunks) == reference(raw)
    assert chunks[0].count(b"\n") == 3  # C wrote the first groups before the refusal


# -- fuzz: arbitrary and broken bytes never crash and never differ --------------------------

_fuzz = settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])


@_fuzz
@given(st.binary(max_size=64))
def test_arbitrary_bytes(raw: bytes) -> None:
    check(raw)


@_fuzz
@given(log_group_lists(), st.data())
def test_truncated_and_mutated_encodings(raw: bytes, data: st.DataObject) -> None:
    check(raw[: data.draw(st.integers(0, len(raw)))])
    if raw:
        mutated = bytearray(raw)
        for _ in range(data.draw(st.integers(1, 3))):
            mutated[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
        check(bytes(mutated))


def test_bad_arguments_raise() -> None:
    raw = one_log_list(vi(1, 1))
    for offset, max_bytes in ((-1, 10), (len(raw) + 1, 10), (0, 0)):
        with pytest.raises(ValueError, match=r"outside|positive"):
            fastjsonl.encode_chunk(raw, offset, max_bytes)
    with pytest.raises(TypeError):
        fastjsonl.encode_chunk("not bytes", 0, 10)
    assert fastjsonl.encode_chunk(b"", 0, 10) == (b"", 0, 0)
    with pytest.raises(ValueError, match="positive"):
        next(Batch(0, "c", "n", raw, 1).jsonl_chunks(0))


@pytest.mark.parametrize("fast", [True, False], ids=["C", "python"])
def test_write_jsonl_writes_what_jsonl_chunks_yields(
    fast: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both paths, including a refusal that resumes in Python after the groups C wrote."""
    good = ld(1, ld(1, vi(1, 1) + ld(2, content(b"k", "v\u00e9\n".encode()))) * 3)
    empty_group = bytes([9 << 3 | 3, 9 << 3 | 4])  # legal protobuf, left to Python by C
    bad = ld(1, ld(1, vi(1, 2) + empty_group + ld(2, content(b"k", b"w\xff"))))
    monkeypatch.setattr(models, "_fastjsonl", fastjsonl if fast else None)
    for raw in (good * 2 + bad + good, good, b""):
        batch = Batch(0, "c", "n", raw, 1)
        fd = os.memfd_create("jsonl")
        try:
            size = batch.write_jsonl(fd, 16)
            os.lseek(fd, 0, os.SEEK_SET)
            assert os.read(fd, size + 1) == reference(raw) == batch.jsonl()
        finally:
            os.close(fd)
    with pytest.raises(ValueError, match="positive"):
        Batch(0, "c", "n", good, 1).write_jsonl(0, 0)


def test_a_failing_write_raises_the_os_error() -> None:
    raw = one_log_list(vi(1, 1) + ld(2, content(b"k", b"v")))
    full = os.open("/dev/full", os.O_WRONLY)
    try:
        with pytest.raises(OSError, match="No space left") as caught:
            fastjsonl.write_chunk(raw, 0, 10, full)
        assert caught.value.errno == 28  # ENOSPC, as os.write would raise
    finally:
        os.close(full)
    with pytest.raises(ValueError, match="file descriptor"):
        fastjsonl.write_chunk(raw, 0, 10, -1)
    with pytest.raises(ValueError, match="outside"):
        fastjsonl.write_chunk(raw, len(raw) + 1, 10, 1)


def test_loghubd_no_c_disables_the_extension() -> None:
    code = "import loghubd.models as m; print(m._fastjsonl is None)"

    def run(**env: str) -> str:
        return fresh_python(code, **env)

    assert run(LOGHUBD_NO_C="1") == "True"
    assert run() == "False"


@pytest.mark.parametrize("special", [b"\x00", b"\x1f", b'"', b"\\", b"\x7f", "é".encode(), b"\xff"])
def test_one_byte_to_escape_at_every_position_of_every_length(special: bytes) -> None:
    """Values and keys of 1 to 40 bytes with one byte (or sequence) to escape at each place:
    the word-at-a-time scans (short values, the tail of longer ones) must not skip it."""
    lgl = pb.LogGroupListRaw()
    group = lgl.LogGroups.add()
    for n in range(1, 41):
        for i in range(n):
            text = b"a" * i + special + b"b" * (n - i - 1)
            log = group.Logs.add(Time=1)
            log.Contents.add(Key=b"k", Value=text)
            if special.isascii():  # keys must be UTF-8: only those are keys too
                log.Contents.add(Key=text, Value=b"v")
    check(lgl.SerializeToString())
