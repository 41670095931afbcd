"""`synthetic_batch`: a small batch the engine and the conversion children warm up with
(never written anywhere). Its own module so that neither imports the other for it."""

from __future__ import annotations

import time

from loghubd import Batch
from loghubd.protocol import cursor as cursors
from loghubd.protocol import pb


def synthetic_batch(rows: int = 16) -> Batch:
    """A small batch for the warm-up (never written anywhere)."""
    lgl = pb.LogGroupList()
    group = lgl.LogGroups.add(Topic="warm-up", Source="loghubd-spark")
    group.LogTags.add(Key="host", Value="warm-up")
    now = int(time.time())
    for n in range(rows):
        entry = group.Logs.add(Time=now, Time_ns=n)
        for key, value in (("id", str(n)), ("level", "INFO"), ("msg", f"warm-up {n}")):
            entry.Contents.add(Key=key, Value=value)
    return Batch(0, cursors.encode(1), cursors.encode(2), lgl.SerializeToString(), 1)
