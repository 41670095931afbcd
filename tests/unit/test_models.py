"""Batch: the flattened record format processors see, and the non-UTF-8 fallback."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from loghubd.models import Batch
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
