"""`spark.readStream.format("loghub")`: a Structured Streaming source for LogHub on the PySpark
Python Data Source API (pyspark >= 4.2).

    from loghubd_spark import LogHubDataSource
    spark.dataSource.register(LogHubDataSource)
    df = (spark.readStream.format("loghub")
          .option("endpoint", "https://cn-hangzhou.log.aliyuncs.com")
          .option("project", "shop").option("logstore", "app")
          .option("accessKeyId", ...).option("accessKeySecret", ...)
          .option("consumerGroup", "spark-app")          # progress shows in `loghubd status`
          .option("maxLogGroupsPerTrigger", 2000)
          .load())

**Offsets** are `{"<shard>": "<cursor>", ...}` (keys in shard order, so that equal offsets are
equal JSON): where the next micro-batch of each shard starts. `latestOffset` lists the shards
and their end cursors; a micro-batch reads `[start, end)` of every shard that moved, one
partition per shard. The initial offset is symbolic, `{"@start": <startingPosition>}`, a
pure function of the options: Spark's offset log keeps only end offsets and asks
`initialOffset()` again when it re-runs an unfinished micro-batch 0, so cursors taken at that
moment (`end` moves) would not fit the end it logged. `begin` and unix seconds resolve to the
same cursors whenever asked; with `end`, micro-batch 0 is empty and its end (the ends seen
when it is planned, kept in the offset log) is where reading starts.
A shard that appears (split, merge) enters the offsets at its begin cursor and is read from
the next micro-batch on; a read-only shard stays at its end once read to it (finished); a
shard that is gone (deleted, expired) leaves the offsets.

**Ordering** (`order`, by default the consumer group's own flag): a child shard's offset stays
at its begin cursor, so no partition reads it, until every parent is finished in the batch's
start offsets: read-only, at its end, and its own parents finished. Parents come from the
`parents` key of ListShards (a `loghubd serve` extension); a service without it (Alibaba
Cloud SLS) gets a lineage heuristic: the ancestors of a shard are the shards with a smaller id
whose hash-key range overlaps its own (SLS numbers shards increasingly and key ranges of
live shards never overlap, so an older overlapping shard held those keys earlier).

**Admission control**: `maxLogGroupsPerTrigger` → `getDefaultReadLimit()` is
`ReadMaxRows(n)`, counted in log groups (the unit cursors step in), shared fairly between the
shards that have data. `Trigger.AvailableNow` is supported (the end cursors seen at its start
are the target).

**Reads** run in executors' Python workers: `read` pulls exactly `[start, end)` with loghubd's
SLS client (`source.SyncSls`) and yields Arrow record batches in the `spark` processor's
schema (`arrow.SCHEMA`), converted by the same code (`arrow.convert`). Log groups that expired
(past the logstore's TTL) before their micro-batch read them fail it (`DataLost`, naming
`failOnDataLoss`); with `failOnDataLoss` false they are skipped with a warning and the read
goes on from the oldest retained log group. A refused cursor that is not older than the
retained data (another logstore's, past the end) always fails.

**Progress**: the offsets of every finished micro-batch become the consumer group's
checkpoints (forced, no heartbeat needed), when Spark asks for the next batch (`latestOffset`
gets the finished batch's end as `start`) and in `commit`, so that `loghubd status` and the
SLS console show progress; failures are logged, never fatal: Spark's checkpoint directory,
not the group, is the source of truth for exactly-once.
"""

from __future__ import annotations

import contextlib
import difflib
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from loghubd.arrow import convert, position, split_log_groups, steps_per_group
from loghubd.protocol import errors as E
from loghubd.protocol.signing import Credentials
from loghubd.wal import Range
from loghubd_spark.options import endpoint_problem
from loghubd_spark.planning import Offsets, ShardInfo, _ordered, plan
from loghubd_spark.source import SyncSls, retained_from
from loghubd_spark.stream_config import DEFAULT_CONSUMER

log = logging.getLogger("loghubd.spark.stream")

NAME = "loghub"
# The `spark` processor's columns (arrow.SCHEMA), as Spark sees them.
SCHEMA_DDL = (
    "`__time__` TIMESTAMP, `__time_ns__` BIGINT, `__topic__` STRING, `__source__` STRING, "
    "`__tags__` MAP<STRING, STRING>, `contents` MAP<STRING, STRING>, `shard` INT, "
    "`cursor` STRING"
)
DEFAULT_MIN_POLL_INTERVAL_MS = 500
GROUP_TIMEOUT_S = 60  # of a consumer group the source creates (nobody heartbeats in it)


# -- options ------------------------------------------------------------------------------------

# Every option, by its lower-cased name (Spark hands options over case-insensitively).
OPTIONS = {
    name.lower(): name
    for name in (
        "endpoint",
        "project",
        "logstore",
        "accessKeyId",
        "accessKeySecret",
        "securityToken",
        "authVersion",
        "region",
        "consumerGroup",
        "consumerName",
        "startingPosition",
        "maxLogGroupsPerTrigger",
        "order",
        "minPollIntervalMs",
        "failOnDataLoss",
    )
}


class OptionError(ValueError):
    pass


class DataLost(RuntimeError):
    """A micro-batch's log groups expired before it read them (failOnDataLoss is true)."""


class OffsetError(ValueError):
    """Offsets that cannot describe a micro-batch (a range whose start is after its end)."""


def _fail(name: str, why: str) -> OptionError:
    return OptionError(f"loghub source option {name!r}: {why}")


def _unknown(key: str) -> str:
    """Why `key` is refused, with the documented spelling of the nearest option: Spark hands
    the keys over lower-cased, so the user's own spelling cannot be echoed."""
    near = difflib.get_close_matches(key.lower(), OPTIONS, n=1)
    if near:
        return f"unknown option (did you mean {OPTIONS[near[0]]}?)"
    return f"unknown option (known: {', '.join(OPTIONS.values())})"


@dataclass(frozen=True, slots=True)
class StreamOptions:
    """The source's options, validated. Secrets are kept out of `repr`."""

    endpoint: str
    project: str
    logstore: str
    access_key_id: str = field(default="", repr=False)
    access_key_secret: str = field(default="", repr=False)
    security_token: str = field(default="", repr=False)
    auth_version: str = "v1"
    region: str = ""
    consumer_group: str = ""
    consumer_name: str = DEFAULT_CONSUMER
    starting_position: str = "begin"  # begin, end, or unix seconds (as text)
    max_log_groups_per_trigger: int | None = None
    order: bool | None = None  # None: the consumer group's own flag (False without a group)
    min_poll_interval_s: float = DEFAULT_MIN_POLL_INTERVAL_MS / 1000
    fail_on_data_loss: bool = True

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> StreamOptions:
        given: dict[str, str] = {}
        for key, value in options.items():
            name = OPTIONS.get(str(key).lower())
            if name is None:
                raise _fail(str(key), _unknown(str(key)))
            given[name] = "" if value is None else str(value)

        def text(name: str, default: str | None = None) -> str:
            value = given.get(name, default)
            if value is None or not value.strip():
                if default is None:
                    raise _fail(name, "required")
                return default
            return value.strip()

        auth_version = text("authVersion", "v1")
        if auth_version not in ("v1", "v4"):
            raise _fail("authVersion", f"expected v1 or v4, got {auth_version!r}")
        region = text("region", "")
        if auth_version == "v4" and not region:
            raise _fail("region", "required with authVersion v4")
        key_id, secret = given.get("accessKeyId", ""), given.get("accessKeySecret", "")
        if bool(key_id) != bool(secret):
            raise _fail("accessKeySecret" if key_id else "accessKeyId", "give both or neither")
        start = text("startingPosition", "begin")
        if start not in ("begin", "end"):
            try:
                seconds = int(start)
            except ValueError:
                raise _fail(
                    "startingPosition", f"expected begin, end or unix seconds, got {start!r}"
                ) from None
            if seconds < 0:
                raise _fail("startingPosition", "unix seconds must not be negative")
            start = str(seconds)
        limit: int | None = None
        if "maxLogGroupsPerTrigger" in given:
            limit = _positive_int("maxLogGroupsPerTrigger", given["maxLogGroupsPerTrigger"])
        order = _flag(given, "order")
        poll_ms = DEFAULT_MIN_POLL_INTERVAL_MS
        if "minPollIntervalMs" in given:
            poll_ms = _positive_int("minPollIntervalMs", given["minPollIntervalMs"], zero=True)
        endpoint = text("endpoint")
        problem = endpoint_problem(endpoint)
        if problem is not None:  # the daemon's words, without its `source.endpoint: `
            raise _fail("endpoint", problem.split(": ", 1)[-1])
        return cls(
            endpoint=endpoint,
            project=text("project"),
            logstore=text("logstore"),
            access_key_id=key_id,
            access_key_secret=secret,
            security_token=given.get("securityToken", ""),
            auth_version=auth_version,
            region=region,
            consumer_group=text("consumerGroup", ""),
            consumer_name=text("consumerName", DEFAULT_CONSUMER),
            starting_position=start,
            max_log_groups_per_trigger=limit,
            order=order,
            min_poll_interval_s=poll_ms / 1000,
            fail_on_data_loss=_flag(given, "failOnDataLoss") is not False,
        )

    def credentials(self) -> Credentials:
        return Credentials(self.access_key_id, self.access_key_secret, self.security_token)

    def client(self, purpose: str) -> SyncSls:
        return SyncSls(
            self.endpoint,
            self.project,
            self.credentials,
            auth_version=self.auth_version,
            region=self.region,
            user_agent=f"loghubd-spark/0.1-stream-{purpose}",
        )


def _flag(given: Mapping[str, str], name: str) -> bool | None:
    """A true/false option; None when not given."""
    if name not in given:
        return None
    flag = given[name].strip().lower()
    if flag not in ("true", "false"):
        raise _fail(name, f"expected true or false, got {given[name]!r}")
    return flag == "true"


def _positive_int(name: str, value: str, *, zero: bool = False) -> int:
    try:
        number = int(value)
    except ValueError:
        raise _fail(name, f"expected an integer, got {value!r}") from None
    if number < 0 or (number == 0 and not zero):
        raise _fail(name, f"must be > {'= ' if zero else ''}0, got {number}")
    return number


class ShardRange(InputPartition):
    """Log groups [start, end) of one shard: one Spark task."""

    def __init__(self, shard: int, start: str, end: str) -> None:
        super().__init__(shard)
        self.shard, self.start, self.end = shard, start, end


START_KEY = "@start"  # the initial offset: {"@start": <startingPosition>}, resolved later


def symbolic_start(offsets: Mapping[str, str]) -> str | None:
    """The starting position an initial offset stands for (None: real cursors)."""
    return offsets.get(START_KEY)


def partitions(start: Mapping[str, str], end: Mapping[str, str]) -> list[ShardRange]:
    """One partition per shard that moved; a shard new in `end` has nothing to read yet.
    A range whose start lies after its end is refused: such offsets belong to no run of
    this query (another logstore's checkpoint, or a bug), and reading them would fail
    later with a misleading error."""
    out: list[ShardRange] = []
    for key in sorted(end, key=int):
        begin = start.get(key)
        if begin is not None and begin != end[key]:
            a, b = position(begin), position(end[key])
            if a is not None and b is not None and a > b:
                raise OffsetError(
                    f"loghub source: inconsistent offsets for shard {key}: the micro-batch "
                    f"would start at position {a}, after its end {b} (start {begin}, end "
                    f"{end[key]}); is the checkpoint location another query's?"
                )
            out.append(ShardRange(int(key), begin, end[key]))
    return out


def read_range(options: StreamOptions, part: ShardRange) -> Iterator[pa.RecordBatch]:
    """Exactly the log groups of `part`, as Arrow record batches of `arrow.SCHEMA`. Log groups
    the service no longer keeps (past the logstore's TTL) fail the read (DataLost), or with
    `failOnDataLoss` false are skipped: the read goes on from the oldest retained one."""
    with options.client("read") as sls:
        at = part.start
        while at != part.end:
            try:
                for piece in sls.pieces(options.logstore, Range(part.shard, at, part.end)):
                    count = len(split_log_groups(piece.raw))
                    per_group = steps_per_group(piece.cursor, piece.next_cursor, count) is not None
                    table = convert(part.shard, piece.cursor, piece.raw, per_group=per_group).table
                    for batch in table.to_batches():
                        if batch.num_rows:
                            yield batch
                    at = piece.next_cursor
            except E.InvalidCursor as exc:
                at = _past_expired(options, sls, part, at, exc)
            else:
                return


def _past_expired(
    options: StreamOptions, sls: SyncSls, part: ShardRange, at: str, exc: E.SlsError
) -> str:
    """Where reading `part` goes on after the service refused cursor `at`: the oldest retained
    log group, when `at` is older (expired) and failOnDataLoss is false; `part.end` when the
    whole rest of the range expired. Anything else is raised."""
    resume = retained_from(sls, options.logstore, part.shard, at, part.end)
    if resume is None:
        raise exc  # not an expiry: a foreign or malformed cursor
    if options.fail_on_data_loss:
        raise DataLost(
            f"shard {part.shard}: the logs from cursor {at} expired (the service keeps a "
            f"logstore's data for its TTL) before this micro-batch read them; to skip what "
            "expired and go on (it is lost either way), set the option failOnDataLoss to "
            "false (spark-stream: fail_on_data_loss = false)"
        ) from exc
    log.warning(
        "loghub_data_lost shard=%s from=%s to=%s: expired before this micro-batch read it "
        "(failOnDataLoss is false)",
        part.shard,
        at,
        resume,
    )
    return resume


class LogHubStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """One per query on the driver (offsets, commits); pickled into executors' tasks (reads),
    where only `options` is used. Nothing here touches the network before the first call."""

    def __init__(self, options: StreamOptions) -> None:
        self.options = options
        self._reset()

    def _reset(self) -> None:
        self._sls: SyncSls | None = None
        self._order: bool | None = self.options.order
        self._readonly_ends: dict[int, str] = {}  # a read-only shard's end never moves
        self._targets: dict[int, str] | None = None  # Trigger.AvailableNow
        self._latest: Offsets | None = None
        self._idle_until = 0.0
        self._committed: dict[str, str] = {}
        self._group_ready = False

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.options = state["options"]
        self._reset()

    # -- driver: service calls -------------------------------------------------------------

    @property
    def sls(self) -> SyncSls:
        if self._sls is None:
            self._sls = self.options.client("driver")
        return self._sls

    def _shards(self) -> list[ShardInfo]:
        logstore = self.options.logstore
        listing = self.sls.call(lambda c: c.list_shards(logstore))
        return sorted((ShardInfo.from_json(s) for s in listing), key=lambda s: s.shard)

    def _cursor(self, shard: int, where: str) -> str:
        logstore = self.options.logstore
        return self.sls.call(lambda c: c.get_cursor(logstore, shard, where))

    def _end(self, info: ShardInfo) -> str:
        cached = self._readonly_ends.get(info.shard)
        if cached is not None:
            return cached
        end = self._cursor(info.shard, "end")
        if info.readonly:
            self._readonly_ends[info.shard] = end
        return end

    def _resolve_order(self) -> bool:
        if self._order is None:
            self._order = False
            group = self.options.consumer_group
            if group:
                logstore = self.options.logstore
                try:
                    groups = self.sls.call(lambda c: c.list_groups(logstore))
                except E.SlsError as exc:
                    log.warning("cannot list consumer groups (order = false): %s", exc)
                    groups = []
                found = next((g for g in groups if g.get("name") == group), None)
                self._order = bool(found and found.get("order"))
        return self._order

    def _ensure_group(self) -> None:
        group = self.options.consumer_group
        if not group or self._group_ready:
            return
        logstore, order = self.options.logstore, self._resolve_order()
        with contextlib.suppress(E.ConsumerGroupAlreadyExist):
            self.sls.call(lambda c: c.create_group(logstore, group, GROUP_TIMEOUT_S, order))
        self._group_ready = True

    # -- driver: the DataSourceStreamReader API ----------------------------------------------

    def initialOffset(self) -> dict[Any, Any]:
        """`{"@start": <startingPosition>}`: symbolic, a pure function of the options. Spark
        keeps only end offsets in its offset log and asks again for the start of an unfinished
        micro-batch 0 after a restart: real cursors taken now (`end` moves) would no longer
        match the end it logged. `latestOffset` and `partitions` resolve it."""
        if self.options.consumer_group:
            try:
                self._ensure_group()
            except E.SlsError as exc:
                log.warning("cannot create consumer group %s: %s", self.options.consumer_group, exc)
        return {START_KEY: self.options.starting_position}

    def _resolve(self, where: str, shards: Sequence[int]) -> Offsets:
        """The real start of micro-batch 0 for `startingPosition` = `where`. `begin` and unix
        seconds resolve to the same cursors whenever asked (while the data is kept); `end` is
        resolved only where its value is recorded: as batch 0's end (see `partitions`)."""
        out: dict[str, str] = {}
        for shard in shards:
            with contextlib.suppress(E.ShardNotExist):  # gone meanwhile: nothing to read
                out[str(shard)] = self._cursor(shard, where)
        return _ordered(out)

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_log_groups_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        self._targets = {s.shard: self._cursor(s.shard, "end") for s in self._shards()}

    def latestOffset(self, start: dict[Any, Any], limit: ReadLimit) -> dict[Any, Any]:
        if isinstance(limit, ReadMaxRows):
            budget: int | None = limit.max_rows  # counted in log groups
        elif isinstance(limit, ReadAllAvailable):
            budget = None
        else:
            raise ValueError(f"loghub source: unsupported read limit {limit!r}")
        current = {str(k): str(v) for k, v in start.items()}
        where = symbolic_start(current)
        now = time.monotonic()
        if where is None and self._targets is None and now < self._idle_until:
            return _ordered(current)  # polled for nothing a moment ago
        shards = self._shards()
        ends = {s.shard: self._end(s) for s in shards}
        if where == "end":  # batch 0 is empty: it starts where it ends, the ends seen now
            current = _ordered({str(k): v for k, v in ends.items()})
        elif where is not None:
            current = self._resolve(where, [s.shard for s in shards])
        begins = {
            s.shard: self._cursor(s.shard, "begin") for s in shards if str(s.shard) not in current
        }
        end = plan(
            current,
            shards,
            ends,
            begins,
            order=self._resolve_order(),
            budget=budget,
            targets=self._targets,
        )
        self._latest = _ordered({str(k): v for k, v in ends.items()})
        # Spark asks for the next batch once the one ending at `start` is in its commit log:
        # `start` is done (this also records the last batch of Trigger.AvailableNow).
        if where is None:
            self._commit_offsets(current)
        if end == _ordered(current):
            self._idle_until = now + self.options.min_poll_interval_s
        return end

    def reportLatestOffset(self) -> dict[Any, Any] | None:
        return self._latest

    def partitions(self, start: dict[Any, Any], end: dict[Any, Any]) -> Sequence[InputPartition]:
        first = {str(k): str(v) for k, v in start.items()}
        last = {str(k): str(v) for k, v in end.items()}
        where = symbolic_start(first)
        if where == "end":
            first = last  # batch 0 of a query started at the end reads nothing
        elif where is not None:
            first = self._resolve(where, [int(k) for k in last])
        return partitions(first, last)

    def commit(self, end: dict[Any, Any]) -> None:
        self._commit_offsets({str(k): str(v) for k, v in end.items()})

    def _commit_offsets(self, offsets: Mapping[str, str]) -> None:
        """The consumer group's checkpoints := `offsets` (forced, shards that moved only).
        Failures are logged: the group only shows progress."""
        group = self.options.consumer_group
        if not group:
            return
        logstore, consumer = self.options.logstore, self.options.consumer_name
        try:
            self._ensure_group()
            for key, cursor in _ordered(offsets).items():
                if self._committed.get(key) == cursor:
                    continue
                with contextlib.suppress(E.ShardNotExist):  # deleted meanwhile
                    self._commit(logstore, group, consumer, int(key), cursor)
                self._committed[key] = cursor
        except E.SlsError as exc:
            log.warning("cannot commit the consumer group's checkpoints: %s", exc)

    def _commit(self, logstore: str, group: str, consumer: str, shard: int, cursor: str) -> None:
        self.sls.call(lambda c: c.commit(logstore, group, consumer, shard, cursor, force=True))

    def stop(self) -> None:
        sls, self._sls = self._sls, None
        if sls is not None:
            sls.close()

    # -- executors -------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, ShardRange):
            raise TypeError(f"loghub source: unexpected partition {partition!r}")
        return read_range(self.options, partition)


class LogHubDataSource(DataSource):
    """`spark.dataSource.register(LogHubDataSource)`, then `spark.readStream.format("loghub")`."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType | str:
        StreamOptions.parse(self.options)  # refuse bad options when the stream is defined
        return SCHEMA_DDL

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return LogHubStreamReader(StreamOptions.parse(self.options))
