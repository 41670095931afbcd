"""Batch.arrow(): fields as columns over the C converter (or its Python twin, the same rows),
checked against a model built from the protobuf messages, on generated batches."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loghubd import arrow, arrow_view
from loghubd.models import Batch
from loghubd.protocol import cursor as cursors
from loghubd.protocol import pb

_names = st.sampled_from(["a", "b", "level", "msg", "__topic__", "__shard__", "é", ""])
_text = st.one_of(_names, st.text(max_size=10))


# Made once (hypothesis validates a strategy built inside a composite at every draw).
_fields = st.lists(_names, min_size=1, max_size=4, unique=True)
_tags = st.lists(st.tuples(_text, _text), max_size=3)
_pairs = st.lists(st.tuples(_names, _text), max_size=6)


@st.composite
def groups(draw: st.DrawFn) -> list[Any]:
    """Log groups with fields that vary from log to log (or not), repeats and empty groups."""
    out = []
    uniform = draw(st.booleans())
    fields = draw(_fields)
    for _ in range(draw(st.integers(0, 4))):
        group = pb.LogGroup(Topic=draw(_text), Source=draw(_text))
        for k, v in draw(_tags):
            group.LogTags.add(Key=k, Value=v)
        for _ in range(draw(st.integers(0, 5))):
            log = group.Logs.add(Time=draw(st.integers(0, 2**32 - 1)))
            if draw(st.booleans()):
                log.Time_ns = draw(st.integers(0, 999_999_999))
            pairs = [(f, draw(_text)) for f in fields] if uniform else draw(_pairs)
            for k, v in pairs:
                log.Contents.add(Key=k, Value=v)
        out.append(group)
    return out


def model(gs: list[Any], shard: int, start: int) -> tuple[list[str], list[dict[str, Any]]]:
    """The field names in order of first appearance, and each row as a dict."""
    names: dict[str, None] = {}
    rows = []
    for i, g in enumerate(gs):
        for log in g.Logs:
            fields: dict[str, str] = {}
            for c in log.Contents:
                fields[c.Key] = c.Value
                names.setdefault(c.Key, None)
            rows.append(
                {
                    "__time_ns__": log.Time * 1_000_000_000 + log.Time_ns,
                    "__topic__": g.Topic,
                    "__source__": g.Source,
                    "__tags__": [(t.Key, t.Value) for t in g.LogTags],
                    "__shard__": shard,
                    "__cursor__": cursors.encode(start + i),
                    **{arrow_view.column_name(k): v for k, v in fields.items()},
                }
            )
    return list(names), rows


def batch_of(gs: list[Any], start: int = 100) -> Batch:
    raw = pb.frame_log_groups([g.SerializeToString() for g in gs])
    return Batch(3, cursors.encode(start), cursors.encode(start + len(gs)), raw, len(gs))


def check(gs: list[Any], fields: list[str] | None = None) -> pa.RecordBatch:
    batch = batch_of(gs)
    rb = batch.arrow(fields)
    assert batch.known_log_count == rb.num_rows == batch_of(gs).log_count  # counted on the way
    names, rows = model(gs, 3, 100)
    wanted = names if fields is None else fields
    assert rb.schema.names == list(arrow_view.FIXED) + [arrow_view.column_name(f) for f in wanted]
    got = rb.to_pylist()
    assert len(got) == len(rows)
    for g, r in zip(got, rows, strict=True):
        assert g.pop("__time__") == pa.scalar(r["__time_ns__"] // 1000, arrow.TIMESTAMP).as_py()
        for f in wanted:
            r.setdefault(arrow_view.column_name(f), None)  # a field the log lacks: null
        assert g == {k: v for k, v in r.items() if k in g}
    return rb


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(groups())
def test_rows_match_the_messages(gs: list[Any]) -> None:
    check(gs)


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(groups(), st.lists(_names, unique=True, max_size=4))
def test_fields_fix_the_schema(gs: list[Any], fields: list[str]) -> None:
    check(gs, fields)


@pytest.fixture(params=["c", "python"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "python":
        monkeypatch.setattr(arrow, "c_parse", None)
        monkeypatch.setattr(arrow_view, "c_fields", None)
    elif arrow.c_parse is None or arrow_view.c_fields is None:
        pytest.fail("loghubd._fastarrow was not built (a C compiler is needed)")
    return str(request.param)


@settings(
    max_examples=50,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(groups())
def test_c_and_python_give_the_same_batch(path: str, gs: list[Any]) -> None:
    check(gs)


def test_c_and_python_equal_bytes_for_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    group = pb.LogGroupRaw(Topic="t")
    for i in range(300):
        log = group.Logs.add(Time=i)
        log.Contents.add(Key="k", Value=b"v\xff" if i % 7 == 0 else str(i).encode())
        if i % 3:
            log.Contents.add(Key=f"f{i % 5}", Value=b"x")
    raw = pb.frame_log_groups([group.SerializeToString()])
    batch = Batch(0, cursors.encode(1), cursors.encode(2), raw, 1)
    fast = batch.arrow()
    monkeypatch.setattr(arrow, "c_parse", None)
    monkeypatch.setattr(arrow_view, "c_fields", None)
    assert Batch(0, cursors.encode(1), cursors.encode(2), raw, 1).arrow().equals(fast)
    assert fast.column("k")[0].as_py() == "v\\xff"  # not UTF-8: backslash escapes


def test_empty_batch_and_repeated_fields() -> None:
    rb = batch_of([]).arrow(["x"])
    assert rb.num_rows == 0
    assert rb.schema.names[-1] == "x"
    group = pb.LogGroup()
    log = group.Logs.add(Time=1)
    for k, v in [("a", "1"), ("b", "2"), ("a", "3")]:
        log.Contents.add(Key=k, Value=v)
    rb = check([group, group])
    assert rb.column("a").to_pylist() == ["3", "3"]


def test_huge_values_many_tags_and_many_fields(path: str) -> None:
    group = pb.LogGroup(Topic="é😀", Source="s")
    for i in range(300):
        group.LogTags.add(Key=f"t{i}", Value="v" * (i % 7))
    for i in range(3):
        log = group.Logs.add(Time=i)
        log.Contents.add(Key="big", Value="x" * (2 << 20) + "é")
        for j in range(200):
            log.Contents.add(Key=f"f{(i + j) % 250}", Value=str(j))
    rb = check([group, pb.LogGroup(), group])  # an empty group between
    assert rb.num_rows == 6
    assert len(rb.column("big")[0].as_py()) == (2 << 20) + 1
    assert len(rb.column("__tags__")[0].as_py()) == 300
