"""The `null` built-in: counts by default; `records = true` builds every dict first."""

from __future__ import annotations

import pytest

from loghubd.models import Batch
from loghubd.plugins.builtin import _null
from loghubd.protocol import pb


class Tracker:
    def __init__(self) -> None:
        self.saved: list[bool] = []

    def save_checkpoint(self, persist: bool = True) -> None:
        self.saved.append(persist)


def batch(logs_per_group: list[int]) -> Batch:
    groups = []
    for n in logs_per_group:
        group = pb.LogGroup(Topic="t")
        for i in range(n):
            group.Logs.add(Time=1700000000 + i).Contents.add(Key="id", Value=str(i))
        groups.append(group.SerializeToString())
    raw = pb.frame_log_groups(groups)  # type: ignore[attr-defined]
    return Batch(0, "c0", "c1", raw, len(groups))


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"records": False},
        {"records": True},
        {"view": "count"},
        {"view": "records", "records": True},
        {"view": "jsonl"},
        {"view": "arrow"},
    ],
)
def test_null_counts_every_log_and_marks_the_batch_done(options: dict[str, object]) -> None:
    processor = _null(options)(0)
    tracker = Tracker()
    for sizes in ([3, 0, 5], [1]):
        processor.process(batch(sizes), tracker)  # type: ignore[arg-type]
    assert processor.count == 9  # type: ignore[attr-defined]
    assert tracker.saved == [False, False]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"records": "yes"}, "processor.null.records"),
        ({"path": "x"}, "processor.null.path"),
        ({"view": "dicts"}, "processor.null.view"),
        ({"view": "jsonl", "records": True}, "processor.null.records: contradicts"),
    ],
)
def test_bad_options_name_the_key(options: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _null(options)
