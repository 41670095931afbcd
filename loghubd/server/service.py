"""The LogHub service behind `loghubd serve`: the operations of the SLS API on top of storage
and the consumer-group coordinator, in SLS terms (SLS error types out), free of HTTP.

The coordinator is pure; this module owns the live `Group` values (loaded lazily from storage,
persisted whenever a step reports a change) and feeds it events: heartbeats, checkpoint
commits, shard changes and clock ticks.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import structlog

from loghubd.protocol import cursor as cursors
from loghubd.protocol import errors as E
from loghubd.protocol import pb
from loghubd.protocol.names import name_problem, sls_name_problem
from loghubd.server import coordinator as co
from loghubd.server.storage import AlreadyExists, Logstore, NotFound, Shard, Storage, StorageError

log = structlog.get_logger("loghubd.server")

# Cap on the raw bytes one PullLogs answer assembles (at least one group is always returned).
PULL_MAX_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Limits:
    max_body_bytes: int = 10 * 1024 * 1024
    max_groups_per_logstore: int = 30
    ttl_day_seconds: float = 86400.0  # seconds per TTL "day"; tests shrink it


@dataclass(frozen=True, slots=True)
class PullResult:
    groups: list[bytes]
    cursor: str  # next cursor
    last_cursor: str  # cursor of the last group returned (request cursor if none)
    raw_size: int
    end_of_cursor: bool


class LogService:
    def __init__(
        self, storage: Storage, clock: Callable[[], float], limits: Limits | None = None
    ) -> None:
        self.storage = storage
        self.clock = clock
        self.limits = limits or Limits()
        self._groups: dict[tuple[int, str], co.Group] = {}
        self._rr = itertools.count()

    # -- projects and logstores --------------------------------------------------------------

    def ensure_project(self, name: str) -> None:
        if self.storage.get_project(name) is None:
            with contextlib.suppress(AlreadyExists):
                self.storage.create_project(name, "", int(self.clock()))

    def create_project(self, name: str, description: str) -> None:
        _check_name("project", name)
        try:
            self.storage.create_project(name, description, int(self.clock()))
        except AlreadyExists:
            raise E.ProjectAlreadyExist(f"project {name} already exist") from None

    def project(self, name: str) -> None:
        if self.storage.get_project(name) is None:
            raise E.ProjectNotExist(f"The Project does not exist : {name}")

    def logstore(self, project: str, name: str) -> Logstore:
        self.project(project)
        ls = self.storage.get_logstore(project, name)
        if ls is None:
            raise E.LogStoreNotExist(f"logstore {name} does not exist")
        return ls

    def create_logstore(self, project: str, name: str, ttl: int, shard_count: int) -> None:
        self.project(project)
        _check_name("logstore", name)
        if not 1 <= shard_count <= 256:
            raise E.LogStoreInfoInvalid("shardCount must be within [1, 256]")
        if not 1 <= ttl <= 3650:
            raise E.LogStoreInfoInvalid("ttl must be within [1, 3650] days")
        try:
            self.storage.create_logstore(project, name, ttl, shard_count, int(self.clock()))
        except AlreadyExists:
            raise E.LogStoreAlreadyExist(f"logstore {name} already exist") from None

    def delete_logstore(self, project: str, name: str) -> None:
        ls = self.logstore(project, name)
        self.storage.delete_logstore(ls.id)
        for key in [k for k in self._groups if k[0] == ls.id]:
            del self._groups[key]

    def delete_project(self, name: str) -> None:
        self.project(name)
        for ls in self.storage.list_logstores(name):
            self.delete_logstore(name, ls.name)
        self.storage.delete_project(name)

    # -- shards ------------------------------------------------------------------------------

    def shards(self, ls: Logstore) -> list[Shard]:
        shards = self.storage.list_shards(ls.id)
        if not shards:
            raise E.LogStoreWithoutShard("logstore has no shard")
        return shards

    def shard(self, ls: Logstore, shard_id: int) -> Shard:
        shard = self.storage.get_shard(ls.id, shard_id)
        if shard is None:
            raise E.ShardNotExist(f"shard {shard_id} does not exist")
        return shard

    def split(self, ls: Logstore, shard_id: int, key: str) -> list[Shard]:
        """Split a readwrite shard at `key`. A refusal keeps SLS's "invalid shard id N" (the
        SDKs match it) and says why: the shard does not exist, or is readonly."""
        self._readwrite(ls, shard_id)
        if len(key) != 32 or not _is_hex(key):
            raise E.ParameterInvalid("invalid mid hash: key must be 32 hex characters")
        try:
            result = self.storage.split_shard(ls.id, shard_id, key.lower(), int(self.clock()))
        except NotFound as exc:
            raise E.ParameterInvalid(f"invalid shard id {shard_id}: {exc}") from None
        except StorageError as exc:
            raise E.ParameterInvalid(f"invalid mid hash: {exc}") from None
        self._shards_added(ls, result[1:], read_only=result[:1])
        return result

    def merge(self, ls: Logstore, shard_id: int) -> list[Shard]:
        """Merge a readwrite shard with its right-hand readwrite neighbour. A refusal keeps
        SLS's "invalid shard id N" and says why: the shard does not exist, is readonly, or
        has no readwrite right-hand neighbour (the storage's reason)."""
        self._readwrite(ls, shard_id)
        try:
            result = self.storage.merge_shard(ls.id, shard_id, int(self.clock()))
        except StorageError as exc:
            raise E.ParameterInvalid(f"invalid shard id {shard_id}: {exc}") from None
        self._shards_added(ls, result[:1], read_only=result[1:])
        return result

    def _readwrite(self, ls: Logstore, shard_id: int) -> None:
        """ParameterInvalid unless `shard_id` is a readwrite shard (split and merge take one)."""
        shard = self.storage.get_shard(ls.id, shard_id)
        if shard is None or shard.readonly:
            why = "does not exist" if shard is None else "is readonly"
            raise E.ParameterInvalid(f"invalid shard id {shard_id}: shard {shard_id} {why}")

    def delete_shard(self, ls: Logstore, shard_id: int) -> None:
        shard = self.shard(ls, shard_id)
        if not shard.readonly:
            raise E.ParameterInvalid("only readonly shards can be deleted")
        self.storage.delete_shard(ls.id, shard_id)
        for row in self.storage.list_groups(ls.id):
            group = self._group(ls, row.name)
            self._step(ls, group, co.ShardsRemoved((shard_id,), self.clock()))

    def _shards_added(self, ls: Logstore, new: list[Shard], read_only: list[Shard]) -> None:
        """A split or merge made `new` shards out of the now `read_only` ones."""
        for row in self.storage.list_groups(ls.id):
            # A group loaded just now (the first use since a restart) already took the new
            # shards from storage: the event only carries what it does not know yet.
            group = self._group(ls, row.name)
            fresh = tuple((s.shard_id, s.parents) for s in new if s.shard_id not in group.shards)
            if fresh:
                group = self._step(ls, group, co.ShardsAdded(fresh, self.clock())).group
            drained = self._drained(ls, row.name, read_only)
            if drained:
                self._step(ls, group, co.ShardsDrained(drained, self.clock()))

    def _drained(self, ls: Logstore, name: str, shards: Iterable[Shard]) -> tuple[int, ...]:
        """The read-only `shards` in which group `name` has nothing left to read: its
        committed checkpoint is the shard's end, or the shard never held a log. Nobody would
        commit that end again (the official consumers commit a checkpoint only when it
        changes), so the coordinator is told (`ShardsDrained`): otherwise the shard stays
        held, and in an ordered group its children wait, for good."""
        stored = self.storage.get_checkpoints(ls.id, name)
        drained = []
        for s in shards:
            if not s.readonly:
                continue
            checkpoint = stored.get(s.shard_id)
            at_end = checkpoint is not None and cursors.decode(checkpoint.cursor) == (
                cursors.shard_base(s.shard_id) + s.next_seq
            )
            if at_end or s.next_seq == 0:
                drained.append(s.shard_id)
        return tuple(drained)

    # -- data --------------------------------------------------------------------------------

    def put(self, ls: Logstore, raw: bytes, hash_key: str | None) -> int:
        """Validate and store one LogGroup; returns how many logs it held."""
        try:
            group = pb.LogGroup.FromString(raw)
        except Exception as exc:  # DecodeError, or missing required fields
            raise E.PostBodyInvalid(f"body is not a valid LogGroup: {exc}") from None
        if not group.IsInitialized():  # upb parses proto2 without checking required fields
            missing = ", ".join(group.FindInitializationErrors()[:5])
            raise E.PostBodyInvalid(f"LogGroup misses required fields: {missing}")
        if len(group.Logs) == 0:
            raise E.PostBodyInvalid("log group holds no logs")
        writable = self.storage.write_routes(ls.id)
        if not writable:
            raise E.LogStoreWithoutShard("logstore has no readwrite shard")
        if hash_key is None:
            route = writable[next(self._rr) % len(writable)]
        else:
            if len(hash_key) != 32 or not _is_hex(hash_key):
                raise E.ParameterInvalid("hash key must be 32 hex characters")
            key = int(hash_key, 16)
            found = next((r for r in writable if r.contains(key)), None)
            if found is None:
                raise E.ParameterInvalid(f"no readwrite shard holds key {hash_key}")
            route = found
        self.storage.append(ls.id, route.shard_id, raw, len(group.Logs), self.clock())
        return len(group.Logs)

    def _seq(self, shard: Shard, text: str) -> int:
        try:
            seq = cursors.to_seq(shard.shard_id, text)
        except cursors.InvalidCursorString as exc:
            raise E.InvalidCursor(f"this cursor is invalid: {exc}") from None
        if not shard.min_seq <= seq <= shard.next_seq:
            raise E.InvalidCursor("this cursor is invalid: outside the retained data")
        return seq

    def pull(
        self, ls: Logstore, shard_id: int, cursor: str, count: int, end_cursor: str | None
    ) -> PullResult:
        shard = self.shard(ls, shard_id)
        start = self._seq(shard, cursor)
        stop = shard.next_seq if end_cursor is None else self._seq(shard, end_cursor)
        groups: list[bytes] = []
        if start < stop and count > 0:
            groups = self.storage.read(ls.id, shard_id, start, stop, count, PULL_MAX_BYTES)
        size = sum(len(g) for g in groups)
        nxt = start + len(groups)
        last = nxt - 1 if groups else start
        return PullResult(
            groups=groups,
            cursor=cursors.from_seq(shard_id, nxt),
            last_cursor=cursors.from_seq(shard_id, last),
            raw_size=size,
            end_of_cursor=nxt >= stop and (end_cursor is not None or shard.readonly),
        )

    def cursor(self, ls: Logstore, shard_id: int, where: str) -> str:
        shard = self.shard(ls, shard_id)
        if where == "begin":
            seq = shard.min_seq
        elif where == "end":
            seq = shard.next_seq
        else:
            try:
                when = int(where)
            except ValueError:
                raise E.ParameterInvalid(
                    f"from must be begin, end or unix seconds: {where!r}"
                ) from None
            if when < 0:
                raise E.ParameterInvalid("from must not be negative")
            found = self.storage.seq_at_time(ls.id, shard_id, when)
            seq = shard.next_seq if found is None else found
        return cursors.from_seq(shard_id, seq)

    def cursor_time(self, ls: Logstore, shard_id: int, cursor: str) -> int:
        shard = self.shard(ls, shard_id)
        seq = self._seq(shard, cursor)
        when = self.storage.time_at_seq(ls.id, shard_id, seq)
        if when is None:  # the end position: the time of the last group, or of the shard
            when = self.storage.time_at_seq(ls.id, shard_id, seq - 1) if seq > 0 else None
        return int(when if when is not None else shard.create_time)

    def expire(self) -> int:
        """Delete log groups older than their logstore's TTL."""
        now = self.clock()
        removed = 0
        for ls in self.storage.all_logstores():
            removed += self.storage.expire(ls.id, now - ls.ttl * self.limits.ttl_day_seconds)
        return removed

    # -- consumer groups ---------------------------------------------------------------------

    def _group(self, ls: Logstore, name: str) -> co.Group:
        key = (ls.id, name)
        group = self._groups.get(key)
        if group is not None:
            return group
        row = next((r for r in self.storage.list_groups(ls.id) if r.name == name), None)
        if row is None:
            raise E.ConsumerGroupNotExist(f"consumer group {name} does not exist")
        now = self.clock()
        if row.state:
            group = co.from_dict(json.loads(row.state), now)
        else:
            group = co.new_group(name, float(row.timeout), row.order)
        # Shards may have appeared while the group was not loaded: bring it up to date.
        known = set(group.shards)
        missing = [s for s in self.storage.list_shards(ls.id) if s.shard_id not in known]
        if missing:
            added = tuple((s.shard_id, s.parents) for s in missing)
            group = co.step(group, co.ShardsAdded(added, now)).group
            drained = self._drained(ls, name, missing)
            if drained:
                group = co.step(group, co.ShardsDrained(drained, now)).group
        self._groups[key] = group
        return group

    def _step(self, ls: Logstore, group: co.Group, event: co.Event) -> co.Outcome:
        try:
            outcome = co.step(group, event)
        except co.UnknownConsumerWithShards:
            raise E.NotExistConsumerWithBody(
                "non-exist consumer with non-empty body of heartbeat message"
            ) from None
        except co.UnknownShard:
            raise E.ShardNotExist("shard does not exist in this consumer group") from None
        except co.UnknownConsumer:
            raise E.ConsumerNotExist("consumer does not exist in this consumer group") from None
        except co.NotOwner:
            raise E.ConsumerNotMatch("consumer does not hold this shard") from None
        if outcome.changed:  # stored first: if that fails, memory stays what storage holds
            self._persist(ls, outcome.group)
        self._groups[(ls.id, group.name)] = outcome.group
        return outcome

    def _persist(self, ls: Logstore, group: co.Group) -> None:
        self.storage.save_group(
            ls.id, group.name, int(group.timeout), group.order, json.dumps(co.to_dict(group))
        )

    def create_group(self, ls: Logstore, name: str, timeout: int, order: bool) -> None:
        _check_name("consumer group", name)
        if timeout <= 0:
            raise E.JsonInfoInvalid("timeout must be a positive number of seconds")
        existing = self.storage.list_groups(ls.id)
        if any(r.name == name for r in existing):
            raise E.ConsumerGroupAlreadyExist("consumer group already exist")
        if len(existing) >= self.limits.max_groups_per_logstore:
            raise E.ConsumerGroupQuotaExceed(
                f"at most {self.limits.max_groups_per_logstore} consumer groups per logstore"
            )
        group = co.new_group(name, float(timeout), order)
        listed = self.storage.list_shards(ls.id)
        shards = tuple((s.shard_id, s.parents) for s in listed)
        group = co.step(group, co.ShardsAdded(shards, self.clock())).group
        drained = self._drained(ls, name, listed)  # no checkpoint yet: never-written ones
        if drained:
            group = co.step(group, co.ShardsDrained(drained, self.clock())).group
        self.storage.create_group(ls.id, name, timeout, order, json.dumps(co.to_dict(group)))
        self._groups[(ls.id, name)] = group

    def update_group(
        self, ls: Logstore, name: str, timeout: int | None, order: bool | None
    ) -> None:
        group = self._group(ls, name)
        if timeout is not None and timeout <= 0:
            raise E.JsonInfoInvalid("timeout must be a positive number of seconds")
        # _step saves the group when the update changed it (once; nothing to save otherwise)
        self._step(
            ls,
            group,
            co.GroupUpdated(order, None if timeout is None else float(timeout), self.clock()),
        )

    def list_groups(self, ls: Logstore) -> list[co.Group]:
        return [self._group(ls, r.name) for r in self.storage.list_groups(ls.id)]

    def delete_group(self, ls: Logstore, name: str) -> None:
        self._group(ls, name)
        self.storage.delete_group(ls.id, name)
        self._groups.pop((ls.id, name), None)

    def heartbeat(
        self,
        ls: Logstore,
        name: str,
        consumer: str,
        held: list[int],
        allowed: frozenset[int] | None = None,
    ) -> list[int]:
        """`allowed`: loghubd's allow-list extension (the consumer's `consumer.shards`)."""
        group = self._group(ls, name)
        outcome = self._step(
            ls, group, co.HeartbeatReceived(consumer, frozenset(held), self.clock(), allowed)
        )
        return list(outcome.answer)

    def leave(self, ls: Logstore, name: str, consumer: str) -> None:
        self._step(ls, self._group(ls, name), co.ConsumerLeft(consumer, self.clock()))

    def commit(
        self, ls: Logstore, name: str, consumer: str, shard_id: int, checkpoint: str, force: bool
    ) -> None:
        group = self._group(ls, name)
        try:
            value = cursors.decode(checkpoint)
        except cursors.InvalidCursorString:
            raise E.InvalidShardCheckPoint(f"checkpoint {checkpoint[:64]!r} is invalid") from None
        shard = self.storage.get_shard(ls.id, shard_id)
        if shard is None:
            raise E.ShardNotExist(f"shard {shard_id} does not exist")
        # Another shard's cursor is refused here, where the mistake is made: stored, it would
        # make the next pull InvalidCursor, on which the official consumer jumps to the END
        # of the shard and skips its unread logs without a word. (A cursor of this shard is
        # accepted wherever it points, as PROTOCOL.md §16.7 advises: a refused commit can
        # kill the Python consumer's worker thread.)
        owner = cursors.shard_of(value)
        if owner != shard_id:
            whose = f"shard {owner}" if owner >= 0 else "no shard"
            raise E.InvalidShardCheckPoint(
                f"checkpoint {checkpoint[:64]!r} is a cursor of {whose}, not of shard {shard_id}"
            )
        at_end = shard.readonly and value == cursors.shard_base(shard_id) + shard.next_seq
        self._step(
            ls, group, co.CheckpointCommitted(shard_id, consumer, force, at_end, self.clock())
        )
        now_us = int(self.clock() * 1_000_000)
        canonical = cursors.encode(value)  # as stored and answered: without a trailing newline
        self.storage.set_checkpoint(ls.id, name, shard_id, canonical, consumer, now_us)

    def checkpoints(self, ls: Logstore, name: str, shard_id: int | None) -> list[dict[str, object]]:
        group = self._group(ls, name)
        stored = self.storage.get_checkpoints(ls.id, name)
        ids = (
            sorted(group.shards)
            if shard_id is None
            else ([shard_id] if shard_id in group.shards else [])
        )
        out: list[dict[str, object]] = []
        for sid in ids:
            cp = stored.get(sid)
            out.append(
                {
                    "shard": sid,
                    "checkpoint": cp.cursor if cp else "",
                    "updateTime": cp.update_time_us if cp else 0,
                    "consumer": cp.consumer if cp else "",
                }
            )
        return out

    def tick(self) -> None:
        """Evaluate consumer timeouts of every loaded group (the periodic ticker calls this)."""
        now = self.clock()
        for (ls_id, _name), group in list(self._groups.items()):
            outcome = co.step(group, co.Ticked(now))
            self._groups[(ls_id, group.name)] = outcome.group
            if outcome.changed:
                self.storage.save_group(
                    ls_id,
                    group.name,
                    int(group.timeout),
                    group.order,
                    json.dumps(co.to_dict(outcome.group)),
                )

    def loaded_groups(self, ls_id: int) -> list[co.Group]:
        """The groups of a logstore that are live in memory (for metrics)."""
        return [g for (lid, _n), g in self._groups.items() if lid == ls_id]

    def group_view(self, ls: Logstore, name: str) -> co.Group:
        return self._group(ls, name)


def _is_hex(text: str) -> bool:
    try:
        int(text, 16)
    except ValueError:
        return False
    return True


def _check_name(kind: str, name: str) -> None:
    """Refuse a name `serve` cannot take; warn of one that only the cloud would refuse."""
    problem = name_problem(name)
    if problem is not None:
        code = {"project": E.ParameterInvalid, "logstore": E.LogStoreInfoInvalid}.get(
            kind, E.JsonInfoInvalid
        )
        raise code(f"invalid {kind} name {name[:140]!r}: {problem}")
    if (cloud := sls_name_problem(kind, name)) is not None:
        log.warning(
            "name_refused_by_sls",
            kind=kind,
            name=name,
            reason=cloud,
            hint=f"loghubd serve takes it, but Alibaba Cloud's SLS would refuse this {kind} name",
        )
