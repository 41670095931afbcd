"""What the serve console shows, read from a running `loghubd serve`: logstores with their
shards and write rates, consumer groups with owners and lag, and the newest logs of a tail.

Live consumer-group state (consumers, heartbeats, owners) comes from the `LogService`; stored
facts come from the same SQLite database through a read-only connection of the console's
own (WAL lets it read beside the writer), with one statement per question so a page stays
cheap with hundreds of shards (bench/console_bench.py).
"""

from __future__ import annotations

import json
import sqlite3
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loghubd.console.paging import ROWS_PER_PAGE, Pages
from loghubd.protocol import cursor as cursors
from loghubd.protocol import pb
from loghubd.server import spl
from loghubd.server.coordinator import ShardState
from loghubd.server.service import LogService
from loghubd.server.storage import Logstore, Shard

RATE_WINDOW_S = 300.0  # write rate: the last five minutes ...
RATE_BUCKET_S = 15.0  # ... in 20 steps
TAIL_LOGS = 50  # a tail shows this many of the newest logs ...
TAIL_SCAN_GROUPS = 64  # ... found in at most this many of the newest log groups
_PER_SHARD = 4  # newest groups looked at per shard at least (when tailing many shards)
LAG_SCAN_GROUPS = 256  # log groups read per shard to count the lag in logs
# The tail keeps flattened groups (and what each SPL statement keeps of them) for at most
# this many logs in all (a group of 4,096 logs counts 4,096): a few tens of MB at most.
TAIL_CACHE_LOGS = 50_000
_Found = tuple[int, tuple[tuple[int, dict[str, str]], ...]]  # see Reader._filtered
_SHARD_COLS = (
    "shard_id, readonly, begin_key, end_key, create_time, parents, next_seq, min_seq, stored_bytes"
)
# Enum's `.value` is a descriptor call (slow on 3.11); a group page reads 256 of them.
_STATE_TEXT = {state: state.value for state in ShardState}


@dataclass(frozen=True, slots=True)
class ShardRow:
    shard: Shard
    children: tuple[int, ...]
    rate: tuple[float, ...]  # logs/s per bucket, oldest first

    @property
    def state(self) -> str:
        return "readonly" if self.shard.readonly else "readwrite"


@dataclass(frozen=True, slots=True)
class LogstoreView:
    logstore: Logstore
    shards: tuple[ShardRow, ...]
    rate: tuple[float, ...]  # the whole logstore, logs/s per bucket
    groups: tuple[str, ...]
    pages: Pages  # `shards` holds the rows of this page


@dataclass(frozen=True, slots=True)
class ConsumerRow:
    name: str
    heartbeat_age: float
    held: int


@dataclass(frozen=True, slots=True)
class GroupShardRow:
    shard: int
    state: str
    owner: str
    next: str
    checkpoint_time: float | None  # receive time at the committed position (None: none)
    lag_logs: int
    lag_groups: int
    lag_seconds: float
    lag_estimated: bool = False  # far behind: lag_logs is scaled from the first groups


@dataclass(frozen=True, slots=True)
class GroupView:
    logstore: Logstore
    name: str
    timeout: float
    order: bool
    consumers: tuple[ConsumerRow, ...]
    shards: tuple[GroupShardRow, ...]
    pages: Pages  # `shards` holds the rows of this page
    consumer_pages: Pages  # `consumers` holds the rows of this page


@dataclass(frozen=True, slots=True)
class TailLog:
    shard: int
    seq: int
    index: int  # position of the log within its group
    record: dict[str, str]  # the flattened log (after the SPL program)

    @property
    def key(self) -> str:
        return f"{self.shard}-{self.seq}-{self.index}"


@dataclass(frozen=True, slots=True)
class TailView:
    logs: tuple[TailLog, ...]
    scanned_logs: int
    error: str = ""  # the SPL statement's error, with its position


@dataclass(slots=True)
class _Writes:
    """A logstore's received logs per rate bucket, as far as the reader has read."""

    seen: dict[int, int] = field(default_factory=dict)  # shard → next_seq counted up to
    total: dict[int, int] = field(default_factory=dict)  # bucket → logs
    by_shard: dict[int, dict[int, int]] = field(default_factory=dict)  # bucket → shard → logs


class Reader:
    """Reads one server's state for the console pages (all calls are short and synchronous,
    like the service's own)."""

    def __init__(self, service: LogService, db_path: Path) -> None:
        self.service = service
        self._db = sqlite3.connect(
            f"file:{db_path}?mode=ro", uri=True, check_same_thread=False, isolation_level=None
        )
        self._rate_memo: dict[tuple[int, int], _Writes] = {}
        self._tail_cache: OrderedDict[tuple[object, ...], _Found] = OrderedDict()
        self._tail_cached = 0  # logs held in _tail_cache

    def close(self) -> None:
        self._db.close()

    # -- projects and logstores --------------------------------------------------------------

    def projects(self) -> list[tuple[str, list[Logstore]]]:
        storage = self.service.storage
        return [(p.name, storage.list_logstores(p.name)) for p in storage.list_projects()]

    def find(self, project: str, name: str) -> Logstore | None:
        return self.service.storage.get_logstore(project, name)

    def shard_count(self, ls_id: int) -> int:
        (count,) = self._db.execute(
            "SELECT count(*) FROM shards WHERE logstore_id = ?", (ls_id,)
        ).fetchone()
        return int(count)

    def has_shard(self, ls_id: int, shard: int) -> bool:
        return (
            self._db.execute(
                "SELECT 1 FROM shards WHERE logstore_id = ? AND shard_id = ?", (ls_id, shard)
            ).fetchone()
            is not None
        )

    def shard_ids(self, ls_id: int) -> list[int]:
        return [
            int(r[0])
            for r in self._db.execute(
                "SELECT shard_id FROM shards WHERE logstore_id = ? ORDER BY shard_id", (ls_id,)
            )
        ]

    def _shard_rows(self, where: str, params: tuple[object, ...]) -> list[Shard]:
        rows = self._db.execute(f"SELECT {_SHARD_COLS} FROM shards {where}", params)
        return [
            Shard(sid, bool(ro), begin, end, ctime, tuple(json.loads(parents)), nxt, low, size)
            for sid, ro, begin, end, ctime, parents, nxt, low, size in rows
        ]

    def logstore(
        self, ls: Logstore, now: float, page: str | None = None, size: int = ROWS_PER_PAGE
    ) -> LogstoreView:
        """The logstore, with the shards of page `page` (a `page=` value) of its shard table."""
        pages = Pages.of(page, self.shard_count(ls.id), size)
        shards = self._shard_rows(
            "WHERE logstore_id = ? ORDER BY shard_id LIMIT ? OFFSET ?",
            (ls.id, pages.size, pages.first),
        )
        children: dict[int, list[int]] = {}
        # Only shards made by a split or merge have parents: few rows, whatever the page.
        for sid, parents in self._db.execute(
            "SELECT shard_id, parents FROM shards WHERE logstore_id = ? AND parents != '[]'"
            " ORDER BY shard_id",
            (ls.id,),
        ):
            for p in json.loads(parents):
                children.setdefault(p, []).append(int(sid))
        # Buckets are aligned on multiples of RATE_BUCKET_S; the last one is the current,
        # partly elapsed bucket, whose rate counts only the time elapsed in it.
        steps = int(RATE_WINDOW_S / RATE_BUCKET_S)
        first_bucket = int(now // RATE_BUCKET_S) - steps + 1
        spans = [RATE_BUCKET_S] * (steps - 1) + [
            max(now - (first_bucket + steps - 1) * RATE_BUCKET_S, 1.0)
        ]
        counts: dict[int, list[float]] = {s.shard_id: [0.0] * steps for s in shards}
        total = [0.0] * steps
        writes = self._writes(ls, first_bucket)
        for bucket, logs in writes.total.items():
            i = bucket - first_bucket
            if not 0 <= i < steps:  # a clock step backwards: a bucket from the future
                continue
            total[i] += logs / spans[i]
            per_shard = writes.by_shard[bucket]
            for sid, row in counts.items():
                n = per_shard.get(sid)
                if n:
                    row[i] += n / spans[i]
        groups = tuple(g.name for g in self.service.storage.list_groups(ls.id))
        return LogstoreView(
            ls,
            tuple(
                ShardRow(s, tuple(children.get(s.shard_id, ())), tuple(counts[s.shard_id]))
                for s in shards
            ),
            tuple(total),
            groups,
            pages,
        )

    def _writes(self, ls: Logstore, first: int) -> _Writes:
        """Logs received per 15 s bucket (from bucket `first`), by shard and in all, kept
        up to date incrementally: stored groups never change, so a refresh reads only the
        groups stored since the last one (per shard, by position: `next_seq` says which),
        and a shard seen for the first time is read from the window's start by time."""
        key = (ls.id, ls.create_time)
        memo = self._rate_memo.pop(key, None) or _Writes()
        self._rate_memo[key] = memo  # most recently used last
        if len(self._rate_memo) > 64:  # logstores looked at: forget the least recent
            self._rate_memo.pop(next(iter(self._rate_memo)))
        for old in [b for b in memo.total if b < first]:
            del memo.total[old]
            del memo.by_shard[old]
        nexts = self._db.execute(
            "SELECT shard_id, next_seq FROM shards WHERE logstore_id = ?", (ls.id,)
        ).fetchall()
        moved = [(sid, memo.seen[sid], n) for sid, n in nexts if memo.seen.get(sid, n) < n]
        new = [(sid, n) for sid, n in nexts if sid not in memo.seen]
        since = first * RATE_BUCKET_S
        reads = []
        if moved:
            reads.append(
                (
                    f"WITH c(shard_id, lo, hi) AS (VALUES {','.join(['(?, ?, ?)'] * len(moved))})"
                    " SELECT l.shard_id, CAST(l.recv_time / ? AS INTEGER), l.log_count FROM c"
                    " CROSS JOIN log_groups l ON l.logstore_id = ? AND l.shard_id = c.shard_id"
                    " AND l.seq >= c.lo AND l.seq < c.hi WHERE l.recv_time >= ?",
                    (*[x for m in moved for x in m], RATE_BUCKET_S, ls.id, since),
                )
            )
        if new:
            reads.append(
                (
                    f"WITH c(shard_id, hi) AS (VALUES {','.join(['(?, ?)'] * len(new))})"
                    " SELECT l.shard_id, CAST(l.recv_time / ? AS INTEGER), l.log_count FROM c"
                    " CROSS JOIN log_groups l ON l.logstore_id = ? AND l.shard_id = c.shard_id"
                    " AND l.recv_time >= ? AND l.seq < c.hi",
                    (*[x for m in new for x in m], RATE_BUCKET_S, ls.id, since),
                )
            )
        total, by_shard = memo.total, memo.by_shard
        for sql, params in reads:
            for sid, bucket, n in self._db.execute(sql, params):
                if bucket not in total:
                    total[bucket] = 0
                    by_shard[bucket] = {}
                total[bucket] += n
                per = by_shard[bucket]
                per[sid] = per.get(sid, 0) + n
        memo.seen.update(nexts)
        return memo

    # -- consumer groups ---------------------------------------------------------------------

    def group(
        self,
        ls: Logstore,
        name: str,
        now: float,
        page: str | None = None,
        size: int = ROWS_PER_PAGE,
        consumers_page: str | None = None,
    ) -> GroupView | None:
        """The group, with the shards of page `page` (a `page=` value) of its shard table and
        the consumers of page `consumers_page` of its consumer table: the live state of every
        shard is in memory, stored facts are read for the page only."""
        if name not in {g.name for g in self.service.storage.list_groups(ls.id)}:
            return None
        group = self.service.group_view(ls, name)
        held: dict[str, int] = dict.fromkeys(group.consumers, 0)
        for entry in group.shards.values():
            if entry.owner is not None:
                held[entry.owner] = held.get(entry.owner, 0) + 1
        ids = sorted(group.shards)
        pages = Pages.of(page, len(ids), size)
        page_ids = ids[pages.first : pages.stop]
        lo, hi = (page_ids[0], page_ids[-1]) if page_ids else (0, -1)
        stored = dict(
            self._db.execute(
                "SELECT shard_id, cursor FROM checkpoints WHERE logstore_id = ? AND group_name = ?"
                " AND shard_id BETWEEN ? AND ?",
                (ls.id, name, lo, hi),
            ).fetchall()
        )
        positions: dict[int, int] = {}
        for sid in page_ids:
            cp = stored.get(sid)
            try:
                positions[sid] = cursors.to_seq(sid, cp) if cp else 0
            except cursors.InvalidCursorString:
                positions[sid] = 0
        # only the positions of the page's shards (no key ranges, no parents to decode)
        bounds: dict[int, tuple[int, int]] = {
            sid: (nxt, low)
            for sid, nxt, low in self._db.execute(
                "SELECT shard_id, next_seq, min_seq FROM shards WHERE logstore_id = ?"
                " AND shard_id BETWEEN ? AND ?",
                (ls.id, lo, hi),
            )
        }
        lags = self._lags(ls.id, positions)
        rows = []
        for sid in page_ids:
            entry = group.shards[sid]
            counted, lag_logs, oldest, last = lags.get(sid, (0, 0, None, None))
            has_cp = bool(stored.get(sid))
            bound = bounds.get(sid)
            lag_groups = counted
            if bound is not None:
                lag_groups = max(0, bound[0] - max(positions[sid], bound[1]))
            estimated = lag_groups > counted  # past LAG_SCAN_GROUPS: scaled from what was read
            if estimated and counted:
                lag_logs = round(lag_logs * lag_groups / counted)
            rows.append(
                GroupShardRow(
                    sid,
                    _STATE_TEXT[entry.state],
                    entry.owner or "",
                    entry.next or "",
                    (oldest if oldest is not None else last) if has_cp else None,
                    lag_logs,
                    lag_groups,
                    max(0.0, now - oldest) if oldest is not None else 0.0,
                    estimated,
                )
            )
        members = sorted(group.consumers.items())
        consumer_pages = Pages.of(consumers_page, len(members), size)
        consumers = tuple(
            ConsumerRow(c, max(0.0, now - t), held.get(c, 0))  # held: over every shard
            for c, t in members[consumer_pages.first : consumer_pages.stop]
        )
        return GroupView(
            ls, name, group.timeout, group.order, consumers, tuple(rows), pages, consumer_pages
        )

    def _lags(
        self, ls_id: int, positions: dict[int, int]
    ) -> dict[int, tuple[int, int, float | None, float | None]]:
        """shard → (groups, logs, receive time of the oldest unconsumed group, receive time of
        the last consumed one) past each committed position, in one statement. At most
        LAG_SCAN_GROUPS groups are read per shard, so a consumer far behind costs no more."""
        if not positions:
            return {}
        values = ",".join("(?, ?)" for _ in positions)
        params: list[Any] = [x for item in positions.items() for x in item]
        rows = self._db.execute(
            f"WITH cp(shard_id, seq) AS (VALUES {values})"
            " SELECT cp.shard_id, count(l.seq), coalesce(sum(l.log_count), 0), min(l.recv_time),"
            " (SELECT recv_time FROM log_groups p WHERE p.logstore_id = ?"
            "  AND p.shard_id = cp.shard_id AND p.seq = cp.seq - 1)"
            " FROM cp LEFT JOIN log_groups l ON l.logstore_id = ? AND l.shard_id = cp.shard_id"
            " AND l.seq >= cp.seq AND l.seq < cp.seq + ? GROUP BY cp.shard_id",
            (*params, ls_id, ls_id, LAG_SCAN_GROUPS),
        )
        return {int(r[0]): (int(r[1]), int(r[2]), r[3], r[4]) for r in rows}

    # -- tail --------------------------------------------------------------------------------

    def tail(self, ls: Logstore, shard_count: int, shard: int | None, query: str) -> TailView:
        """The newest logs (newest first) of one shard or of the whole logstore (which has
        `shard_count` shards), through the SPL statement `query` when one is given."""
        program: spl.Program | None = None
        if query.strip():
            try:
                program = spl.compile(query)
            except spl.SplError as exc:
                return TailView((), 0, str(exc))
        # Enough candidates per shard that the newest TAIL_SCAN_GROUPS of the logstore are
        # among them however writes are spread (few shards: more from each), read by
        # primary key (the shard row knows next_seq); CROSS JOIN keeps shards the outer
        # loop: a seek per shard, not a scan of the logstore.
        per_shard = max(_PER_SHARD, -(-TAIL_SCAN_GROUPS // max(shard_count, 1)))
        if shard is not None:
            shards, since = [shard], float("-inf")
        else:
            # Only shards whose newest group is among the TAIL_SCAN_GROUPS newest shards'
            # newest can hold a candidate, and none older than the last of those (T): those
            # newest groups already are TAIL_SCAN_GROUPS candidates at T or later (ties go
            # by shard id, as below). One cheap statement finds them; reading only their
            # shards is exact and spares a read of per_shard groups from every shard.
            newest = self._db.execute(
                "SELECT l.shard_id, l.recv_time FROM shards s CROSS JOIN log_groups l"
                " ON l.logstore_id = s.logstore_id AND l.shard_id = s.shard_id"
                " AND l.seq = s.next_seq - 1 WHERE s.logstore_id = ?"
                " ORDER BY l.recv_time DESC, l.shard_id DESC LIMIT ?",
                (ls.id, TAIL_SCAN_GROUPS),
            ).fetchall()
            shards = [sid for sid, _t in newest]
            full = len(newest) == TAIL_SCAN_GROUPS
            since = newest[-1][1] if full else float("-inf")
        candidates = (
            self._db.execute(
                f"WITH c(shard_id) AS (VALUES {','.join(['(?)'] * len(shards))})"
                " SELECT l.shard_id, l.seq, l.recv_time FROM c CROSS JOIN shards s"
                " ON s.logstore_id = ? AND s.shard_id = c.shard_id CROSS JOIN log_groups l"
                " ON l.logstore_id = s.logstore_id AND l.shard_id = s.shard_id"
                " AND l.seq >= s.next_seq - ? AND l.seq < s.next_seq WHERE l.recv_time >= ?"
                " ORDER BY l.recv_time DESC, l.shard_id DESC, l.seq DESC LIMIT ?",
                (*shards, ls.id, per_shard, since, TAIL_SCAN_GROUPS),
            ).fetchall()
            if shards
            else []
        )
        logs: list[TailLog] = []
        scanned = 0
        for sid, seq, recv in candidates:
            found = self._filtered(ls, sid, seq, recv, program)
            if found is None:  # expired meanwhile
                continue
            count, kept = found
            for index, record in kept:
                logs.append(TailLog(sid, seq, index, record))
                if len(logs) >= TAIL_LOGS:
                    # as if read from the newest log down to this one
                    scanned += count - index
                    return TailView(tuple(logs), scanned)
            scanned += count
        return TailView(tuple(logs), scanned)

    def _filtered(
        self, ls: Logstore, sid: int, seq: int, recv: float, program: spl.Program | None
    ) -> _Found | None:
        """(logs in the group, its logs that pass `program`, newest first, with their index),
        or None when the group is gone. Stored groups never change: the answer is kept per
        (group, statement), so a live tail parses and filters only the groups that are new
        since its last refresh (the key holds the logstore's creation and the receive time,
        so a logstore deleted and made again under the same id is not mistaken for the old)."""
        key = (ls.id, ls.create_time, sid, seq, recv, program.text if program else "")
        cache = self._tail_cache
        hit: _Found | None = cache.get(key)
        if hit is not None:
            cache.move_to_end(key)
            return hit
        base = (ls.id, ls.create_time, sid, seq, recv, "")
        records: _Found | None = cache.get(base)
        if records is None:
            row = self._db.execute(
                "SELECT data FROM log_groups WHERE logstore_id = ? AND shard_id = ? AND seq = ?",
                (ls.id, sid, seq),
            ).fetchone()
            if row is None:
                return None
            flat = flatten(bytes(row[0]))
            records = (len(flat), tuple((i, flat[i]) for i in range(len(flat) - 1, -1, -1)))
            self._remember(base, records)
        if program is None:
            return records
        kept = []
        for index, record in records[1]:
            out = program(record)
            if out is not None:
                kept.append((index, out))
        found = (records[0], tuple(kept))
        self._remember(key, found)
        return found

    def _remember(self, key: tuple[object, ...], value: _Found) -> None:
        cache = self._tail_cache
        old = cache.pop(key, None)
        if old is not None:
            self._tail_cached -= len(old[1])
        cache[key] = value
        self._tail_cached += len(value[1])
        while self._tail_cached > TAIL_CACHE_LOGS and len(cache) > 1:
            _key, evicted = cache.popitem(last=False)
            self._tail_cached -= len(evicted[1])


def _text(value: str | bytes) -> str:
    # upb hands out bytes for values that are not UTF-8 (the Raw schema)
    return value if value.__class__ is str else value.decode("utf-8", "replace")  # type: ignore[union-attr]


def flatten(data: bytes) -> list[dict[str, str]]:
    """The logs of one stored LogGroup in the SDK's flattened form (what SPL sees)."""
    try:
        group = pb.LogGroup.FromString(data)
    except Exception:  # stored groups were validated; a bad one shows as nothing
        return []
    base = {"__topic__": _text(group.Topic), "__source__": _text(group.Source)}
    for t in group.LogTags:
        base["__tag__:" + _text(t.Key)] = _text(t.Value)
    out = []
    for log in group.Logs:
        record = {"__time__": str(log.Time), **base}
        for c in log.Contents:
            k, v = c.Key, c.Value
            record[k if k.__class__ is str else _text(k)] = v if v.__class__ is str else _text(v)
        out.append(record)
    return out
