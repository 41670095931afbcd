"""Request fuzzing against a real `loghubd serve`: hypothesis strategies for every route of
`loghubd/server/api.py` (and its `type=` / `action=` variants), a raw-socket HTTP sender, the
protected data set and its checksum.

Two kinds of requests:

- aimed at the **protected** project (`fzkeep`: logstore `keep`, groups `kg`, `kg2`, data in
  every shard, a read-only shard from a split, forced checkpoints). Reads may be anything
  (any answer below 500). Every request that could change something is built so that it
  *must* be refused (`Req.must_refuse`): malformed and truncated protobuf, compressed bodies
  with a lying `x-log-bodyrawsize` (bombs included), broken or ill-typed JSON, invalid and
  foreign cursors, out-of-range shard ids and keys, names that do not exist, heartbeats of
  unknown consumers. They must get a 4xx, and the checksum of the protected data (every
  stored byte, cursors, shards, groups, checkpoints, project and logstore settings) must not
  change.
- aimed at the **scratch** project (`fzscratch`): anything, valid or not, including valid
  writes with non-UTF-8 content, splits, deletes. Only "no 5xx" applies; what it stored must
  still be readable afterwards (`Target.read_back_scratch`).

Plus raw HTTP oddities (wrong methods, unknown paths, huge and odd headers, odd Host headers,
malformed request lines), where an unanswered (closed) connection is allowed only for
requests that are not valid HTTP.

`examples(share)` reads LOGHUBD_FUZZ_EXAMPLES (total examples over all families, default
3000) so that the long run (bench/fuzz_long.py) is this code with a bigger number.
"""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import strategies as st

from tests.reliability.fuzz.groups import groups
from tests.reliability.fuzz.http import http_oddities
from tests.reliability.fuzz.layout import FAMILIES, HOST_SUFFIX, Layout, examples, q
from tests.reliability.fuzz.projects import projects
from tests.reliability.fuzz.putlogs import putlogs
from tests.reliability.fuzz.shards import shards
from tests.reliability.fuzz.target import Target, rss_kb, write_stats
from tests.reliability.fuzz.wire import Reply, Req

STRATEGIES: dict[str, Callable[[Layout], st.SearchStrategy[Req]]] = {
    "putlogs": putlogs,
    "shards": shards,
    "groups": groups,
    "projects": projects,
    "http": http_oddities,
}


__all__ = [
    "FAMILIES",
    "HOST_SUFFIX",
    "STRATEGIES",
    "Layout",
    "Reply",
    "Req",
    "Target",
    "examples",
    "q",
    "rss_kb",
    "write_stats",
]
