"""Test doubles for a processor's own unit tests: a `Batch` built from given logs, and a
`RecordingTracker` that notes what the processor did with its checkpoint.

    batch = make_batch([{"level": "error", "msg": "disk full"}, {"level": "info"}], shard=2)
    tracker = RecordingTracker()
    processor.process(batch, tracker)
    assert tracker.saved == [False]          # one save_checkpoint(persist=False)

The batch holds the same wire bytes a real PullLogs answer does (a LogGroupList), so
`batch.logs()`, `batch.log_count` and every other view behave as in the daemon.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from loghubd.consumer.tracking import StopFlag
from loghubd.models import Batch
from loghubd.protocol import cursor, pb


def make_batch(
    logs: Iterable[Mapping[str, Any]],
    *,
    shard: int = 0,
    start: int = 0,
    group_size: int = 100,
    topic: str = "",
    source: str = "",
    tags: Mapping[str, str] | None = None,
) -> Batch:
    """A batch of `logs` (each a dict of string fields; `__time__` sets its time, default
    now) in log groups of `group_size`, each with `topic`, `source` and `tags`. Its cursors
    are shard `shard`'s positions `start` and `start` + the number of log groups.
    `batch.logs()` yields each log back with `__time__`, `__topic__`, `__source__` and the
    `__tag__:<key>` fields added, as the daemon's batches do."""
    if group_size < 1:
        raise ValueError("group_size: must be >= 1")
    now = int(time.time())
    groups: list[bytes] = []
    group: Any = None
    for record in logs:
        if group is None:
            group = pb.LogGroup(Topic=topic, Source=source)
            for key, value in (tags or {}).items():
                group.LogTags.add(Key=key, Value=value)
        log = group.Logs.add(Time=int(record.get("__time__", now)))
        for key, value in record.items():
            if key == "__time__":
                continue
            if (key.startswith("__") and key.endswith("__")) or key.startswith("__tag__:"):
                raise ValueError(
                    f"{key}: set topic, source and tags through make_batch's arguments"
                )
            log.Contents.add(Key=str(key), Value=str(value))
        if len(group.Logs) == group_size:
            groups.append(group.SerializeToString())
            group = None
    if group is not None:
        groups.append(group.SerializeToString())
    raw = pb.frame_log_groups(groups)
    return Batch(
        shard,
        cursor.from_seq(shard, start),
        cursor.from_seq(shard, start + len(groups)),
        raw,
        len(groups),
        len(raw),
    )


@dataclass
class _RecordedAck:
    tracker: RecordingTracker
    batch: int

    def done(self, persist: bool = False) -> None:
        self.tracker.acked.append((self.batch, persist))


@dataclass
class RecordingTracker:
    """A `loghubd.Tracker` that records calls instead of moving a checkpoint.

    - `saved`: the `persist` flag of each `save_checkpoint` call, in order;
    - `deferred`: how many `defer()` handles were taken; `acked`: `(n, persist)` for each
      `ack.done(persist)`, n being the handle's number (0, 1, ...);
    - `checkpoint`: what `get_checkpoint()` answers (set it to the batch's `next_cursor` to
      imitate a shard whose batches are all finished);
    - `stopping`: `tracker.stopping.set()` imitates a shard that begins to stop (a processor
      that retries inside `process` should then raise `BatchInterrupted`);
    - `problems`: each `note_problem(reason)`, in order.
    """

    checkpoint: str = ""
    saved: list[bool] = field(default_factory=list)
    deferred: int = 0
    acked: list[tuple[int, bool]] = field(default_factory=list)
    stopping: StopFlag = field(default_factory=StopFlag)
    problems: list[str] = field(default_factory=list)

    def note_problem(self, reason: str) -> None:
        self.problems.append(reason)

    def save_checkpoint(self, persist: bool = True) -> None:
        self.saved.append(persist)

    def get_checkpoint(self) -> str:
        return self.checkpoint

    def defer(self) -> _RecordedAck:
        ack = _RecordedAck(self, self.deferred)
        self.deferred += 1
        return ack

    @property
    def finished(self) -> bool:
        """Whether the processor marked its batch done one way or the other."""
        return bool(self.saved) or len(self.acked) == self.deferred > 0
