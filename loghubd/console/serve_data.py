"""What the serve console shows, read from a running `loghubd serve`: logstores with their
shards and write rates, consumer groups with owners and lag, and the newest logs of a tail.

Live consumer-group state (consumers, heartbeats, owners) comes from the `LogService`; stored
facts come from the same SQLite database through a read-only connection of the console's
own (WAL lets it read beside the writer), with one statement per question so a page stays
cheap with hundreds of shards (bench/console_bench.py).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


class Reader:
    """Reads one server's state for the console pages (all calls are short and synchronous,
    like the service's own)."""

    def __init__(self, service: LogService, db_path: Path) -> None:
        self.service = service
        self._db = sqlite3.connect(
            f"file:{db_path}?mode=ro", uri=True, check_same_thread=False, isolation_level=None
        )

    def close(self) -> None:
        self._db.close()

    # -- projects and logstores --------------------------------------------------------------

    def projects(self) -> list[tuple[str, list[Logstore]]]:
        storage = self.service.storage
        return [(p.name, storage.list_logstores(p.name)) for p in storage.list_projects()]

    def find(self, project: str, name: str) -> Logstore | None:
        return self.service.storage.get_logstore(project, name)

    def logstore(self, ls: Logstore, now: float) -> LogstoreView:
        shards = self.service.storage.list_shards(ls.id)
        children: dict[int, list[int]] = {}
        for s in shards:
            for p in s.parents:
                children.setdefault(p, []).append(s.shard_id)
        # Buckets are aligned on multiples of RATE_BUCKET_S; the last one is the current,
        # partly elapsed bucket, whose rate counts only the time elapsed in it.
        steps = int(RATE_WINDOW_S / RATE_BUCKET_S)
        first = int(now // RATE_BUCKET_S) - steps + 1
        spans = [RATE_BUCKET_S] * (steps - 1) + [
            max(now - (first + steps - 1) * RATE_BUCKET_S, 1.0)
        ]
        counts: dict[int, list[float]] = {s.shard_id: [0.0] * steps for s in shards}
        total = [0.0] * steps
        rows = self._db.execute(
            "SELECT shard_id, CAST(recv_time / ? AS INTEGER) - ? AS b, sum(log_count)"
            " FROM log_groups WHERE logstore_id = ? AND recv_time >= ? GROUP BY shard_id, b",
            (RATE_BUCKET_S, first, ls.id, first * RATE_BUCKET_S),
        )
        for sid, bucket, n in rows:
            if 0 <= bucket < steps and sid in counts:
                counts[sid][bucket] += n / spans[bucket]
                total[bucket] += n / spans[bucket]
        groups = tuple(g.name for g in self.service.storage.list_groups(ls.id))
        return LogstoreView(
            ls,
            tuple(
                ShardRow(s, tuple(children.get(s.shard_id, ())), tuple(counts[s.shard_id]))
                for s in shards
            ),
            tuple(total),
            groups,
        )

    # -- consumer groups ---------------------------------------------------------------------

    def group(self, ls: Logstore, name: str, now: float) -> GroupView | None:
        if name not in {g.name for g in self.service.storage.list_groups(ls.id)}:
            return None
        group = self.service.group_view(ls, name)
        stored = self.service.storage.get_checkpoints(ls.id, name)
        positions: dict[int, int] = {}
        for sid in group.shards:
            cp = stored.get(sid)
            try:
                positions[sid] = cursors.to_seq(sid, cp.cursor) if cp and cp.cursor else 0
            except cursors.InvalidCursorString:
                positions[sid] = 0
        shards = {s.shard_id: s for s in self.service.storage.list_shards(ls.id)}
        lags = self._lags(ls.id, positions)
        held: dict[str, int] = {c: 0 for c in group.consumers}
        rows = []
        for sid in sorted(group.shards):
            entry = group.shards[sid]
            if entry.owner is not None:
                held[entry.owner] = held.get(entry.owner, 0) + 1
            counted, lag_logs, oldest, last = lags.get(sid, (0, 0, None, None))
            has_cp = sid in stored and bool(stored[sid].cursor)
            shard = shards.get(sid)
            lag_groups = counted
            if shard is not None:
                lag_groups = max(0, shard.next_seq - max(positions[sid], shard.min_seq))
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
        consumers = tuple(
            ConsumerRow(c, max(0.0, now - t), held.get(c, 0))
            for c, t in sorted(group.consumers.items())
        )
        return GroupView(ls, name, group.timeout, group.order, consumers, tuple(rows))

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

    def tail(self, ls: Logstore, shard_ids: list[int], shard: int | None, query: str) -> TailView:
        """The newest logs (newest first) of one shard or of the whole logstore (whose
        shards are `shard_ids`), through the SPL statement `query` when one is given."""
        program: spl.Program | None = None
        if query.strip():
            try:
                program = spl.compile(query)
            except spl.SplError as exc:
                return TailView((), 0, str(exc))
        candidates: list[tuple[float, int, int]] = []  # (receive time, shard, seq)
        ids = [shard] if shard is not None else shard_ids
        # Enough candidates per shard that the newest TAIL_SCAN_GROUPS of the logstore are
        # among them however writes are spread (few shards: more from each).
        per_shard = max(_PER_SHARD, -(-TAIL_SCAN_GROUPS // max(len(ids), 1)))
        for sid in ids:
            for seq, recv in self._db.execute(
                "SELECT seq, recv_time FROM log_groups WHERE logstore_id = ? AND shard_id = ?"
                " ORDER BY seq DESC LIMIT ?",
                (ls.id, sid, per_shard),
            ):
                candidates.append((recv, sid, seq))
        candidates.sort(reverse=True)
        logs: list[TailLog] = []
        scanned = 0
        for _recv, sid, seq in candidates[:TAIL_SCAN_GROUPS]:
            row = self._db.execute(
                "SELECT data FROM log_groups WHERE logstore_id = ? AND shard_id = ? AND seq = ?",
                (ls.id, sid, seq),
            ).fetchone()
            if row is None:  # expired meanwhile
                continue
            records = flatten(bytes(row[0]))
            for index in range(len(records) - 1, -1, -1):
                scanned += 1
                out = records[index] if program is None else program(records[index])
                if out is not None:
                    logs.append(TailLog(sid, seq, index, out))
                if len(logs) >= TAIL_LOGS:
                    return TailView(tuple(logs), scanned)
        return TailView(tuple(logs), scanned)


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
