"""The C views take short cuts for the wire bytes every writer sends (a Content as Key then
Value, each under 128 bytes; a log's Time first and once, its keys those of the log before).
Any other valid encoding of the same data must come out the same as from the Python path:
here the logs of each group share their keys, so the short cuts are tried on every log, and
each Content, Time and Time_ns is written in one of the forms protobuf allows."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loghubd import arrow, arrow_view
from loghubd.models import Batch
from loghubd.protocol import cursor as cursors
from tests.unit import test_fastarrow as arrow_checks
from tests.unit import test_fastjsonl as jsonl_checks
from tests.unit import test_fastlog as log_checks
from tests.unit.test_fastlog import f32, ld, varint, vi

C_PARSE, C_FIELDS = arrow.c_parse, arrow_view.c_fields
SETTINGS = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def padded_ld(num: int, payload: bytes) -> bytes:
    """A length-delimited field whose length is a varint one byte longer than it need be."""
    n = len(payload)
    return varint(num << 3 | 2) + varint(n)[:-1] + bytes([varint(n)[-1] | 0x80, 0]) + payload


CONTENT_FORMS = {
    "key, value": lambda k, v: ld(1, k) + ld(2, v),
    "value, key": lambda k, v: ld(2, v) + ld(1, k),
    "key twice": lambda k, v: ld(1, b"was") + ld(1, k) + ld(2, v),
    "value twice": lambda k, v: ld(1, k) + ld(2, b"was") + ld(2, v),
    "unknown field after": lambda k, v: ld(1, k) + ld(2, v) + vi(3, 7),
    "unknown field between": lambda k, v: ld(1, k) + f32(5, 1) + ld(2, v),
    "no value": lambda k, v: ld(1, k),
    "padded lengths": lambda k, v: padded_ld(1, k) + padded_ld(2, v),
}
TIME_FORMS = ("first", "last", "twice", "none")

_keys = st.lists(
    st.sampled_from([b"a", b"level", b"__time__", b"x" * 130, "é".encode()]),
    min_size=1,
    max_size=4,
    unique=True,
)
_value = st.sampled_from([b"", b"INFO", b"x" * 127, b"y" * 128, b"\xff", b'q"\n', "é".encode()])
_form = st.sampled_from(sorted(CONTENT_FORMS))
_time_form = st.sampled_from(TIME_FORMS)
_time_ns = st.sampled_from([None, 0, 5, 2**32 - 1])
_time = st.sampled_from([0, 1, 1_700_000_000, 2**32 - 1])


@st.composite
def lists_of_same_keyed_logs(draw: st.DrawFn) -> bytes:
    groups = []
    for _ in range(draw(st.integers(1, 2))):
        keys = draw(_keys)
        logs = []
        for _ in range(draw(st.integers(1, 5))):
            body = b"".join(ld(2, CONTENT_FORMS[draw(_form)](k, draw(_value))) for k in keys)
            time, form, ns = draw(_time), draw(_time_form), draw(_time_ns)
            if form == "first":
                body = vi(1, time) + body
            elif form == "last":
                body = body + vi(1, time)
            elif form == "twice":
                body = vi(1, draw(_time)) + body + vi(1, time)
            if ns is not None:
                body = f32(4, ns) + body if draw(st.booleans()) else body + f32(4, ns)
            logs.append(ld(1, body))
        groups.append(ld(1, b"".join(logs) + ld(3, b"topic") + ld(6, ld(1, b"h") + ld(2, b"v"))))
    return b"".join(groups)


@SETTINGS
@given(lists_of_same_keyed_logs())
def test_jsonl_lines_equal_the_python_path(raw: bytes) -> None:
    jsonl_checks.check(raw)


@SETTINGS
@given(lists_of_same_keyed_logs())
def test_records_equal_the_python_path(raw: bytes) -> None:
    assert log_checks.fast_items(raw) == log_checks.python_items(raw)


@SETTINGS
@given(lists_of_same_keyed_logs())
def test_arrow_table_equals_the_python_path(raw: bytes) -> None:
    arrow_checks.same(raw)


@pytest.mark.parametrize("form", sorted(CONTENT_FORMS))
def test_each_content_form_after_a_canonical_log(form: str) -> None:
    """A log whose Contents are in `form`, after one in the canonical form with the same keys
    (whose keys are then cached)."""
    canonical = ld(2, CONTENT_FORMS["key, value"](b"k", b"v1"))
    other = ld(2, CONTENT_FORMS[form](b"k", b"v2"))
    raw = ld(1, ld(1, vi(1, 1) + canonical) + ld(1, vi(1, 1) + other))
    jsonl_checks.check(raw)
    assert log_checks.fast_items(raw) == log_checks.python_items(raw)
    result: Any = arrow_checks.same(raw)
    assert not isinstance(result, type)


def view(raw: bytes, fast: bool, monkeypatch: pytest.MonkeyPatch) -> pa.RecordBatch:
    """batch.arrow() with or without the C pivot (_fastarrow.fields)."""
    monkeypatch.setattr(arrow, "c_parse", C_PARSE if fast else None)
    monkeypatch.setattr(arrow_view, "c_fields", C_FIELDS if fast else None)
    return Batch(0, cursors.encode(1), cursors.encode(2), raw, 1).arrow()


@pytest.mark.parametrize("special", [b"\xff", "é".encode(), b"\xc3", b"\x00", b'"'])
@pytest.mark.parametrize("where", ["value", "key"])
def test_one_odd_byte_at_every_position_of_every_length(
    special: bytes, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Strings of 1 to 24 bytes with one byte (or sequence) that is not plain ASCII at each
    place, as a value or a key: the word-at-a-time checks (UTF-8, escapes) must see it. Each is
    a list of its own: a byte the C paths refuse refuses the whole list, and would hide the
    places after it. The log before it has the same key, so the short cuts are taken."""
    for n in range(1, 25):
        for i in range(n):
            text = b"a" * i + special + b"b" * (n - i - 1)
            pair = (b"k", text) if where == "value" else (text, b"v")
            logs = [ld(1, vi(1, 1) + ld(2, CONTENT_FORMS["key, value"](*p))) for p in (pair, pair)]
            raw = ld(1, b"".join(logs))
            jsonl_checks.check(raw)
            assert log_checks.outcome(raw, True, monkeypatch) == log_checks.outcome(
                raw, False, monkeypatch
            )
            arrow_checks.same(raw)
            assert view(raw, True, monkeypatch).equals(view(raw, False, monkeypatch))
