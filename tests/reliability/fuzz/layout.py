"""The fuzz run's fixed names, example budget per family and the layout of the protected
data (filled in by `target.Target` when it sets the data up); `q`/`seg` build query strings
and path segments."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote_from_bytes

KEEP_PROJECT = "fzkeep"
KEEP = "keep"
KEEP_GROUPS = ("kg", "kg2")
SCRATCH_PROJECT = "fzscratch"
SCRATCH_LOGSTORES = ("s1", "s2")
SCRATCH_GROUP = "sg"
MAX_BODY = 1_000_000  # the fuzz server's --max-body-bytes
HOST_SUFFIX = "sls.local"
SCRATCH_MAX_SHARDS = 48  # a scratch logstore split beyond this is dropped and made again
RAW_TIMEOUT_S = 1.0  # how long a request that is not valid HTTP may wait for an answer

# Families and their share of the examples.
FAMILIES = {
    "putlogs": 0.25,
    "shards": 0.25,
    "groups": 0.2,
    "projects": 0.15,
    "http": 0.15,
}


def examples(family: str) -> int:
    total = int(os.environ.get("LOGHUBD_FUZZ_EXAMPLES", "3000"))
    return max(20, round(total * FAMILIES[family]))


@dataclass
class Layout:
    """What the strategies need to know about the protected data."""

    shards: list[dict[str, Any]] = field(default_factory=list)  # ListShards of keep
    cursors: dict[int, list[str]] = field(default_factory=dict)  # shard → begin, middle, end

    @property
    def shard_ids(self) -> list[int]:
        return [int(s["shardID"]) for s in self.shards]

    def readwrite(self) -> list[dict[str, Any]]:
        return [s for s in self.shards if s["status"] == "readwrite"]

    def last_readwrite(self) -> int:
        """The readwrite shard with no readwrite right-hand neighbour (cannot be merged)."""
        rw = self.readwrite()
        begins = {s["inclusiveBeginKey"] for s in rw}
        return next(int(s["shardID"]) for s in rw if s["exclusiveEndKey"] not in begins)


def q(**kw: str | bytes) -> tuple[tuple[bytes, bytes], ...]:
    return tuple(
        (k.encode(), v if isinstance(v, bytes) else v.encode("utf-8", "surrogateescape"))
        for k, v in kw.items()
    )


def seg(value: str | bytes) -> str:
    """A path segment, percent-encoded (bytes may be any, also not UTF-8)."""
    raw = value if isinstance(value, bytes) else value.encode("utf-8", "surrogatepass")
    return quote_from_bytes(raw, safe="")
