"""What the Spark engine buffers: `Item` (one daemon batch, possibly trimmed to the log groups
not yet written, with its acks) and `PendingWrite` (a write-ahead entry and the items it
covers, kept as it is until it is written)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import pyarrow as pa

from loghubd import Ack
from loghubd.arrow import Converted
from loghubd.protocol import cursor as cursors
from loghubd.wal import Entry, Lease, Range


@dataclass(eq=False)
class Item:
    """One daemon batch in the buffer (possibly trimmed to the log groups not yet written)."""

    shard: int
    cursor: str
    next_cursor: str
    start: int | None  # position of `cursor` when positions step by one per log group
    group_count: int
    data: Converted
    acks: list[Ack]
    added: float = field(default_factory=time.monotonic)
    # Written alone, in a write of its own: a write that held it with other batches failed.
    solo: bool = False
    # Its own write failed in another batch's `process()` or the timer: it waits for its
    # shard to re-deliver it (a rollback), so that it fails in its own `process()`.
    suspect: bool = False
    rollback_asked: bool = False

    @property
    def key(self) -> tuple[int, str]:
        return (self.shard, self.cursor)

    @property
    def rows(self) -> int:
        return self.data.rows

    @property
    def nbytes(self) -> int:
        return int(self.data.table.nbytes)

    def ranges(self) -> list[Range]:
        """The source ranges this item holds: runs of consecutive converted groups."""
        if self.start is None:
            return [Range(self.shard, self.cursor, self.next_cursor)]
        out: list[Range] = []
        groups = self.data.groups
        i = 0
        while i < len(groups):
            j = i
            while j + 1 < len(groups) and groups[j + 1] == groups[j] + 1:
                j += 1
            a, b = self.start + groups[i], self.start + groups[j] + 1
            out.append(Range(self.shard, cursors.encode(a), cursors.encode(b)))
            i = j + 1
        return out


@dataclass(eq=False)
class PendingWrite:
    entry: Entry
    items: list[Item]
    lease: Lease | None = None
    attempts: int = 0

    def find(self, key: tuple[int, str]) -> Item | None:
        return next((it for it in self.items if it.key == key), None)

    def table(self) -> pa.Table:
        return pa.concat_tables([it.data.table for it in self.items])
