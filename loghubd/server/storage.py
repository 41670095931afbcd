"""SQLite storage for `loghubd serve`: projects, logstores, shards and their lineage, log groups,
consumer groups (with the coordinator's state) and checkpoints.

Durability: WAL mode, one transaction per write call. With `synchronous=NORMAL` a committed
transaction survives the server process being killed (`kill -9`): the data is in the OS page
cache and the WAL. Power loss needs `synchronous=FULL` (`loghubd serve --fsync`).

Log groups are stored as the serialized LogGroup bytes the client sent (after decompression),
keyed by (logstore, shard, seq); PullLogs frames them into a LogGroupList without decoding.
Positions (`seq`) count log groups within a shard from 0 and are never reused, so expiry only
raises a shard's `min_seq`.

Why one module of ~550 lines: every SQL statement against the schema is here, next to the
schema, so a change of a table is one file to read; the methods are thin and independent.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

KEY_SPACE = 1 << 128
MAX_KEY_HEX = "f" * 32

_SCHEMA = """
CREATE TABLE IF NOT EXISTS projects (
    name TEXT PRIMARY KEY,
    description TEXT NOT NULL DEFAULT '',
    create_time INTEGER NOT NULL,
    last_modify_time INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS logstores (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    project TEXT NOT NULL REFERENCES projects(name) ON DELETE CASCADE,
    name TEXT NOT NULL,
    ttl INTEGER NOT NULL,
    create_time INTEGER NOT NULL,
    last_modify_time INTEGER NOT NULL,
    next_shard_id INTEGER NOT NULL,
    UNIQUE (project, name)
);
CREATE TABLE IF NOT EXISTS shards (
    logstore_id INTEGER NOT NULL REFERENCES logstores(id) ON DELETE CASCADE,
    shard_id INTEGER NOT NULL,
    readonly INTEGER NOT NULL DEFAULT 0,
    begin_key TEXT NOT NULL,
    end_key TEXT NOT NULL,
    create_time INTEGER NOT NULL,
    parents TEXT NOT NULL DEFAULT '[]',
    next_seq INTEGER NOT NULL DEFAULT 0,
    min_seq INTEGER NOT NULL DEFAULT 0,
    stored_bytes INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (logstore_id, shard_id)
);
CREATE TABLE IF NOT EXISTS log_groups (
    logstore_id INTEGER NOT NULL,
    shard_id INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    recv_time REAL NOT NULL,
    log_count INTEGER NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (logstore_id, shard_id, seq)
);
CREATE INDEX IF NOT EXISTS log_groups_by_time ON log_groups (logstore_id, shard_id, recv_time);
CREATE TABLE IF NOT EXISTS consumer_groups (
    logstore_id INTEGER NOT NULL REFERENCES logstores(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    timeout INTEGER NOT NULL,
    in_order INTEGER NOT NULL,
    state TEXT,
    PRIMARY KEY (logstore_id, name)
);
CREATE TABLE IF NOT EXISTS checkpoints (
    logstore_id INTEGER NOT NULL,
    group_name TEXT NOT NULL,
    shard_id INTEGER NOT NULL,
    cursor TEXT NOT NULL,
    update_time_us INTEGER NOT NULL,
    consumer TEXT NOT NULL,
    PRIMARY KEY (logstore_id, group_name, shard_id)
);
"""


SQLITE_MIN_INT, SQLITE_MAX_INT = -(2**63), 2**63 - 1


def _storable(text: str) -> bool:
    """Whether SQLite can take this string (lone surrogates from undecodable bytes cannot)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class StorageError(Exception):
    """A request that the stored state does not allow (the API maps it to an SLS code)."""


class AlreadyExists(StorageError):
    pass


class NotFound(StorageError):
    pass


@dataclass(frozen=True, slots=True)
class Project:
    name: str
    description: str
    create_time: int
    last_modify_time: int


@dataclass(frozen=True, slots=True)
class Logstore:
    id: int
    project: str
    name: str
    ttl: int
    create_time: int
    last_modify_time: int


@dataclass(frozen=True, slots=True)
class Shard:
    shard_id: int
    readonly: bool
    begin_key: str
    end_key: str
    create_time: int
    parents: tuple[int, ...]
    next_seq: int
    min_seq: int
    stored_bytes: int


@dataclass(frozen=True, slots=True)
class Route:
    """A readwrite shard's key range, as PutLogs routes a hash key: [begin, end), the last
    shard's all-f end key included."""

    shard_id: int
    begin: int
    end: int
    last: bool  # the end key is ff…f

    def contains(self, key: int) -> bool:
        return self.begin <= key < self.end or (self.last and key == self.end)


@dataclass(frozen=True, slots=True)
class ConsumerGroupRow:
    name: str
    timeout: int
    order: bool
    state: str | None


@dataclass(frozen=True, slots=True)
class Checkpoint:
    shard_id: int
    cursor: str
    update_time_us: int
    consumer: str


def key_hex(value: int) -> str:
    return MAX_KEY_HEX if value >= KEY_SPACE - 1 else f"{value:032x}"


def even_ranges(count: int) -> list[tuple[str, str]]:
    """`count` adjacent [begin, end) ranges covering the whole MD5 key space."""
    bounds = [i * KEY_SPACE // count for i in range(count)] + [KEY_SPACE - 1]
    return [(key_hex(bounds[i]), key_hex(bounds[i + 1])) for i in range(count)]


class Storage:
    """One SQLite database; every method is one short transaction."""

    def __init__(self, path: Path, *, fsync: bool = False) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Made here, owner-only, before SQLite opens it: its -wal and -shm files (and any
        # journal) take the database file's mode, so the stored logs are the owner's alone.
        # An existing file keeps its mode.
        os.close(os.open(path, os.O_RDONLY | os.O_CREAT, 0o600))
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        # Each logstore's readwrite shards by key range, for routing puts (`write_routes`).
        # They change only when shards are created, split, merged or deleted, each of which
        # clears this; the shards' rows change on every put. Storage is used from the event
        # loop's thread only, so a clear cannot race a read.
        self._routes: dict[int, tuple[Route, ...]] = {}
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={'FULL' if fsync else 'NORMAL'}")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    # -- projects ----------------------------------------------------------------------------

    def create_project(self, name: str, description: str, now: int) -> None:
        try:
            with self._tx() as db:
                db.execute(
                    "INSERT INTO projects VALUES (?, ?, ?, ?)", (name, description, now, now)
                )
        except sqlite3.IntegrityError as exc:
            raise AlreadyExists(name) from exc

    def get_project(self, name: str) -> Project | None:
        if not _storable(name):  # e.g. from a Host header that is not UTF-8: no such project
            return None
        row = self._db.execute("SELECT * FROM projects WHERE name = ?", (name,)).fetchone()
        return Project(*row) if row else None

    def update_project(self, name: str, description: str, now: int) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE projects SET description = ?, last_modify_time = ? WHERE name = ?",
                (description, now, name),
            )

    def delete_project(self, name: str) -> None:
        self._routes.clear()
        with self._tx() as db:
            ids = [r[0] for r in db.execute("SELECT id FROM logstores WHERE project=?", (name,))]
            for ls in ids:
                self._delete_logstore_data(db, ls)
            db.execute("DELETE FROM projects WHERE name = ?", (name,))

    def list_projects(self) -> list[Project]:
        return [Project(*r) for r in self._db.execute("SELECT * FROM projects ORDER BY name")]

    # -- logstores ---------------------------------------------------------------------------

    def create_logstore(
        self, project: str, name: str, ttl: int, shard_count: int, now: int
    ) -> None:
        self._routes.clear()
        try:
            with self._tx() as db:
                cur = db.execute(
                    "INSERT INTO logstores (project, name, ttl, create_time, last_modify_time,"
                    " next_shard_id) VALUES (?, ?, ?, ?, ?, ?)",
                    (project, name, ttl, now, now, shard_count),
                )
                ls = cur.lastrowid
                for sid, (begin, end) in enumerate(even_ranges(shard_count)):
                    db.execute(
                        "INSERT INTO shards (logstore_id, shard_id, begin_key, end_key,"
                        " create_time) VALUES (?, ?, ?, ?, ?)",
                        (ls, sid, begin, end, now),
                    )
        except sqlite3.IntegrityError as exc:
            raise AlreadyExists(name) from exc

    def get_logstore(self, project: str, name: str) -> Logstore | None:
        if not (_storable(project) and _storable(name)):
            return None
        row = self._db.execute(
            "SELECT id, project, name, ttl, create_time, last_modify_time FROM logstores"
            " WHERE project = ? AND name = ?",
            (project, name),
        ).fetchone()
        return Logstore(*row) if row else None

    def list_logstores(self, project: str) -> list[Logstore]:
        rows = self._db.execute(
            "SELECT id, project, name, ttl, create_time, last_modify_time FROM logstores"
            " WHERE project = ? ORDER BY name",
            (project,),
        )
        return [Logstore(*r) for r in rows]

    def all_logstores(self) -> list[Logstore]:
        rows = self._db.execute(
            "SELECT id, project, name, ttl, create_time, last_modify_time FROM logstores"
        )
        return [Logstore(*r) for r in rows]

    def update_logstore(self, ls: int, ttl: int, now: int) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE logstores SET ttl = ?, last_modify_time = ? WHERE id = ?", (ttl, now, ls)
            )

    def delete_logstore(self, ls: int) -> None:
        self._routes.clear()
        with self._tx() as db:
            self._delete_logstore_data(db, ls)

    @staticmethod
    def _delete_logstore_data(db: sqlite3.Connection, ls: int) -> None:
        db.execute("DELETE FROM log_groups WHERE logstore_id = ?", (ls,))
        db.execute("DELETE FROM checkpoints WHERE logstore_id = ?", (ls,))
        db.execute("DELETE FROM consumer_groups WHERE logstore_id = ?", (ls,))
        db.execute("DELETE FROM shards WHERE logstore_id = ?", (ls,))
        db.execute("DELETE FROM logstores WHERE id = ?", (ls,))

    # -- shards ------------------------------------------------------------------------------

    _SHARD_COLS = (
        "shard_id, readonly, begin_key, end_key, create_time, parents, next_seq, min_seq,"
        " stored_bytes"
    )

    @staticmethod
    def _shard(row: tuple[object, ...]) -> Shard:
        sid, ro, begin, end, ctime, parents, next_seq, min_seq, size = row
        return Shard(
            int(sid),  # type: ignore[call-overload]
            bool(ro),
            str(begin),
            str(end),
            int(ctime),  # type: ignore[call-overload]
            tuple(json.loads(str(parents))),
            int(next_seq),  # type: ignore[call-overload]
            int(min_seq),  # type: ignore[call-overload]
            int(size),  # type: ignore[call-overload]
        )

    def list_shards(self, ls: int) -> list[Shard]:
        rows = self._db.execute(
            f"SELECT {self._SHARD_COLS} FROM shards WHERE logstore_id = ? ORDER BY shard_id",
            (ls,),
        )
        return [self._shard(r) for r in rows]

    def write_routes(self, ls: int) -> tuple[Route, ...]:
        """The readwrite shards of logstore `ls` by key range, in shard order (cached until
        the logstore's shards change: PutLogs asks on every request)."""
        routes = self._routes.get(ls)
        if routes is None:
            rows = self._db.execute(
                "SELECT shard_id, begin_key, end_key FROM shards"
                " WHERE logstore_id = ? AND readonly = 0 ORDER BY shard_id",
                (ls,),
            )
            routes = tuple(
                Route(sid, int(begin, 16), int(end, 16), end == MAX_KEY_HEX)
                for sid, begin, end in rows
            )
            self._routes[ls] = routes
        return routes

    def get_shard(self, ls: int, shard_id: int) -> Shard | None:
        if not SQLITE_MIN_INT <= shard_id <= SQLITE_MAX_INT:  # a client's number: no such shard
            return None
        row = self._db.execute(
            f"SELECT {self._SHARD_COLS} FROM shards WHERE logstore_id = ? AND shard_id = ?",
            (ls, shard_id),
        ).fetchone()
        return self._shard(row) if row else None

    def _new_shard_id(self, db: sqlite3.Connection, ls: int) -> int:
        (sid,) = db.execute("SELECT next_shard_id FROM logstores WHERE id = ?", (ls,)).fetchone()
        db.execute("UPDATE logstores SET next_shard_id = ? WHERE id = ?", (sid + 1, ls))
        return int(sid)

    def split_shard(self, ls: int, shard_id: int, mid_key: str, now: int) -> list[Shard]:
        """Seal `shard_id` and create its two children [begin, mid) and [mid, end)."""
        self._routes.clear()
        with self._tx() as db:
            parent = self.get_shard(ls, shard_id)
            if parent is None or parent.readonly:
                raise NotFound(f"shard {shard_id} is not a readwrite shard")
            mid = int(mid_key, 16)
            if not int(parent.begin_key, 16) < mid < int(parent.end_key, 16):
                raise StorageError(f"split key {mid_key} is not inside shard {shard_id}'s range")
            db.execute(
                "UPDATE shards SET readonly = 1 WHERE logstore_id = ? AND shard_id = ?",
                (ls, shard_id),
            )
            children = []
            for begin, end in (
                (parent.begin_key, mid_key.lower()),
                (mid_key.lower(), parent.end_key),
            ):
                cid = self._new_shard_id(db, ls)
                db.execute(
                    "INSERT INTO shards (logstore_id, shard_id, begin_key, end_key, create_time,"
                    " parents) VALUES (?, ?, ?, ?, ?, ?)",
                    (ls, cid, begin, end, now, json.dumps([shard_id])),
                )
                children.append(cid)
        return [self._must_shard(ls, s) for s in (shard_id, *children)]

    def merge_shard(self, ls: int, shard_id: int, now: int) -> list[Shard]:
        """Seal `shard_id` and its right-hand readwrite neighbour; create their union."""
        self._routes.clear()
        with self._tx() as db:
            left = self.get_shard(ls, shard_id)
            if left is None or left.readonly:
                raise NotFound(f"shard {shard_id} is not a readwrite shard")
            right = next(
                (s for s in self.list_shards(ls) if not s.readonly and s.begin_key == left.end_key),
                None,
            )
            if right is None:
                raise StorageError(f"shard {shard_id} has no readwrite right-hand neighbour")
            db.execute(
                "UPDATE shards SET readonly = 1 WHERE logstore_id = ? AND shard_id IN (?, ?)",
                (ls, left.shard_id, right.shard_id),
            )
            mid = self._new_shard_id(db, ls)
            db.execute(
                "INSERT INTO shards (logstore_id, shard_id, begin_key, end_key, create_time,"
                " parents) VALUES (?, ?, ?, ?, ?, ?)",
                (
                    ls,
                    mid,
                    left.begin_key,
                    right.end_key,
                    now,
                    json.dumps([left.shard_id, right.shard_id]),
                ),
            )
        return [self._must_shard(ls, s) for s in (mid, left.shard_id, right.shard_id)]

    def delete_shard(self, ls: int, shard_id: int) -> None:
        self._routes.clear()
        with self._tx() as db:
            db.execute(
                "DELETE FROM log_groups WHERE logstore_id = ? AND shard_id = ?", (ls, shard_id)
            )
            db.execute(
                "DELETE FROM checkpoints WHERE logstore_id = ? AND shard_id = ?", (ls, shard_id)
            )
            db.execute("DELETE FROM shards WHERE logstore_id = ? AND shard_id = ?", (ls, shard_id))

    def _must_shard(self, ls: int, shard_id: int) -> Shard:
        shard = self.get_shard(ls, shard_id)
        assert shard is not None
        return shard

    # -- log groups --------------------------------------------------------------------------

    def append(self, ls: int, shard_id: int, data: bytes, log_count: int, recv_time: float) -> int:
        """Store one serialized LogGroup; returns its position. Committed when this returns."""
        with self._tx() as db:
            row = db.execute(
                "SELECT next_seq, readonly FROM shards WHERE logstore_id = ? AND shard_id = ?",
                (ls, shard_id),
            ).fetchone()
            if row is None or row[1]:
                raise NotFound(f"shard {shard_id} is not writable")
            seq = int(row[0])
            db.execute(
                "INSERT INTO log_groups VALUES (?, ?, ?, ?, ?, ?)",
                (ls, shard_id, seq, recv_time, log_count, data),
            )
            db.execute(
                "UPDATE shards SET next_seq = next_seq + 1, stored_bytes = stored_bytes + ?"
                " WHERE logstore_id = ? AND shard_id = ?",
                (len(data), ls, shard_id),
            )
        return seq

    def read(
        self, ls: int, shard_id: int, start: int, stop: int, max_groups: int, max_bytes: int
    ) -> list[bytes]:
        """Serialized log groups at positions [start, stop): at most `max_groups`, and none
        past `max_bytes` (but always at least one). Rows are fetched lazily, so a capped answer
        does not read the rows it will not send."""
        rows = self._db.execute(
            "SELECT data FROM log_groups WHERE logstore_id = ? AND shard_id = ?"
            " AND seq >= ? AND seq < ? ORDER BY seq LIMIT ?",
            (ls, shard_id, start, stop, max_groups),
        )
        out: list[bytes] = []
        size = 0
        for (data,) in rows:
            if out and size + len(data) > max_bytes:
                break
            out.append(bytes(data))
            size += len(data)
        rows.close()
        return out

    def seq_at_time(self, ls: int, shard_id: int, when: float) -> int | None:
        """First retained position received at or after `when` (None: none is)."""
        when = float(max(-1e18, min(when, 1e18)))  # any client number: SQLite holds 64 bits
        row = self._db.execute(
            "SELECT min(seq) FROM log_groups WHERE logstore_id = ? AND shard_id = ?"
            " AND recv_time >= ?",
            (ls, shard_id, when),
        ).fetchone()
        return None if row[0] is None else int(row[0])

    def time_at_seq(self, ls: int, shard_id: int, seq: int) -> float | None:
        row = self._db.execute(
            "SELECT recv_time FROM log_groups WHERE logstore_id = ? AND shard_id = ? AND seq = ?",
            (ls, shard_id, seq),
        ).fetchone()
        return None if row is None else float(row[0])

    def expire(self, ls: int, before: float) -> int:
        """Delete log groups received before `before`; returns how many went."""
        with self._tx() as db:
            shard_ids = [
                r[0] for r in db.execute("SELECT shard_id FROM shards WHERE logstore_id=?", (ls,))
            ]
            removed = 0
            for sid in shard_ids:
                row = db.execute(
                    "SELECT max(seq), count(*), sum(length(data)) FROM log_groups"
                    " WHERE logstore_id = ? AND shard_id = ? AND recv_time < ?",
                    (ls, sid, before),
                ).fetchone()
                if not row[1]:
                    continue
                db.execute(
                    "DELETE FROM log_groups WHERE logstore_id = ? AND shard_id = ? AND seq <= ?",
                    (ls, sid, row[0]),
                )
                db.execute(
                    "UPDATE shards SET min_seq = max(min_seq, ?), stored_bytes = stored_bytes - ?"
                    " WHERE logstore_id = ? AND shard_id = ?",
                    (row[0] + 1, row[2], ls, sid),
                )
                removed += int(row[1])
        return removed

    # -- consumer groups ---------------------------------------------------------------------

    def create_group(self, ls: int, name: str, timeout: int, order: bool, state: str) -> None:
        try:
            with self._tx() as db:
                db.execute(
                    "INSERT INTO consumer_groups VALUES (?, ?, ?, ?, ?)",
                    (ls, name, timeout, int(order), state),
                )
        except sqlite3.IntegrityError as exc:
            raise AlreadyExists(name) from exc

    def list_groups(self, ls: int) -> list[ConsumerGroupRow]:
        rows = self._db.execute(
            "SELECT name, timeout, in_order, state FROM consumer_groups WHERE logstore_id = ?"
            " ORDER BY name",
            (ls,),
        )
        return [ConsumerGroupRow(r[0], int(r[1]), bool(r[2]), r[3]) for r in rows]

    def save_group(self, ls: int, name: str, timeout: int, order: bool, state: str) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE consumer_groups SET timeout = ?, in_order = ?, state = ?"
                " WHERE logstore_id = ? AND name = ?",
                (timeout, int(order), state, ls, name),
            )

    def delete_group(self, ls: int, name: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM consumer_groups WHERE logstore_id = ? AND name = ?", (ls, name))
            db.execute(
                "DELETE FROM checkpoints WHERE logstore_id = ? AND group_name = ?", (ls, name)
            )

    def set_checkpoint(
        self, ls: int, group: str, shard_id: int, cursor: str, consumer: str, now_us: int
    ) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO checkpoints VALUES (?, ?, ?, ?, ?, ?)",
                (ls, group, shard_id, cursor, now_us, consumer),
            )

    def get_checkpoints(self, ls: int, group: str) -> dict[int, Checkpoint]:
        rows = self._db.execute(
            "SELECT shard_id, cursor, update_time_us, consumer FROM checkpoints"
            " WHERE logstore_id = ? AND group_name = ?",
            (ls, group),
        )
        return {int(r[0]): Checkpoint(int(r[0]), r[1], int(r[2]), r[3]) for r in rows}
