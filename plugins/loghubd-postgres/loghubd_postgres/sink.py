"""One shard's writer: each batch's rows and the shard's new position in ONE transaction.

The positions table holds, per (project, group, logstore, shard), the cursor after the last
batch whose rows are in the table. Each batch runs:

    BEGIN; SELECT position ... FOR UPDATE; COPY rows; UPDATE position = batch end; COMMIT

and the `SELECT ... FOR UPDATE` decides (positions are SLS cursors as integers, `p` the stored
one, the batch covering [start, end)):

- `p` absent or `p <= start`: the rows are not in the table: write them. (`p < start` happens
  when the group checkpoint is ahead of the table, e.g. a batch went to the dead-letter
  directory, or the table is new.)
- `p == end`: the rows are there already (the connection broke after COMMIT, or another
  consumer wrote the same range): nothing to write, the batch is done.
- otherwise (`start < p`, `p != end`): the table is ahead of this consumer: nothing is written
  and the shard re-reads from `p` (the processor returns that cursor). This is how a newly
  granted shard starts from the later of the group checkpoint and the stored position, and
  how a consumer that lost the shard is fenced: whatever it read, the row lock and the check
  make every range of the stream land in the table at most once, and the position only moves
  forward.

A broken connection (PostgreSQL down or restarting) is retried here, with backoff, for as long
as it takes: the outcome of a COMMIT that lost its connection is unknown, and the next
attempt's check above settles it. So is a statement that could not finish now (a lock not
granted within `lock_timeout_s`, a statement timeout, a deadlock, a full disk) and a batch the
database refuses until it is changed (a missing GRANT, table or column): `failures` sorts
them by SQLSTATE. When the shard stops meanwhile (`tracker.stopping`: the
daemon's shutdown, a rebalance), the retrying ends at once with `BatchInterrupted`: the batch
is left for the next owner, whose check settles it the same way. Rows the server refuses (a
data or integrity error, a value too large for an index) are `RowsRefused`, a
`BatchRejected`: the daemon's failure policy applies at once. Anything else propagates to
the daemon's retry and failure policy.

Rows the table refuses (`BadRow`, a data or integrity error from the server) set the batch
aside: its range is noted in `<positions_table>_set_aside` (fenced by the same lock: only while
the stored position is not past it) before the refusal goes to the failure policy, and a
later in-order write overlapping the range drops the note. Under `loghubd dead-letters replay`
(`context.replay`) a batch is written only if its range is noted and not yet replayed, in one
transaction that marks it replayed (and holds the position row lock, as in-order writes do):
a dead letter lands once, however often it is replayed, and never if the range was written in
order meanwhile. The stored position is not touched. Rows of replayed dead letters are never
written again, whatever the boundaries of the batch that meets them: an in-order write copies
only the log groups before the first replayed range it overlaps and moves the stored position
past it (the daemon died before its checkpoint passed the range); a replay copies only the log
groups outside the replayed ranges it overlaps (a letter of another life, cut otherwise). The
replayed ranges are read after the position lock, in a statement of its own, so that a replay
that committed while the lock was awaited is seen.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import psycopg
import structlog
from psycopg import sql

from loghubd import (
    Backoff,
    Batch,
    BatchInterrupted,
    BatchRejected,
    ProcessorContext,
    StopSignal,
    Tracker,
    until_stopping,
)
from loghubd.protocol import cursor as cursors
from loghubd_postgres import failures
from loghubd_postgres.failures import Kind
from loghubd_postgres.metrics import PostgresMetrics
from loghubd_postgres.options import Options
from loghubd_postgres.rows import BadRow, RowEncoder
from loghubd_postgres.schema import copy_statement, positions_name, set_aside_name

log = structlog.get_logger("loghubd.postgres")

# How long a call in flight when the shard begins to stop may still take (a batch's
# transaction takes milliseconds): after that it is taken for stuck and given up.
STOP_PATIENCE_S = 5.0
CHUNK_ROWS = 250  # rows converted per worker-thread call, sent while the next is converted
# The table refused the rows themselves: retrying the same rows cannot help.
# (ProgramLimitExceeded: a value too large for an index on its column, "index row requires
# 10016 bytes": the same row fails the same way every time.)
REFUSED = (
    BadRow,
    psycopg.errors.DataError,
    psycopg.errors.IntegrityError,
    psycopg.errors.ProgramLimitExceeded,
)


class RowsRefused(BatchRejected):
    """The server refused a batch's rows (a data or integrity error): retrying cannot help,
    so the daemon's failure policy applies at once."""


class NotSetAside(Exception):
    """A replayed dead letter whose range this shard did not note as set aside."""


def uncovered(start: int, end: int, covered: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The runs of [start, end) outside every range of `covered`, in order."""
    runs, at = [], start
    for a, b in sorted(covered):
        if a > at:
            runs.append((at, min(a, end)))
        at = max(at, b)
        if at >= end:
            break
    if at < end:
        runs.append((at, end))
    return [(a, b) for a, b in runs if a < b]


def position(cursor: str) -> int:
    try:
        return cursors.decode(cursor)
    except cursors.InvalidCursorString as exc:
        raise ValueError(f"postgres: cannot order cursor {cursor!r}: {exc}") from exc


class Statements:
    """The SQL of the hot path, composed once per daemon."""

    def __init__(self, options: Options) -> None:
        positions = positions_name(options)
        key = sql.SQL("project = %s AND consumer_group = %s AND logstore = %s AND shard = %s")
        self.ensure = sql.SQL(
            "INSERT INTO {} (project, consumer_group, logstore, shard) VALUES (%s, %s, %s, %s)"
            " ON CONFLICT DO NOTHING"
        ).format(positions)
        self.lock = sql.SQL("SELECT cursor, position FROM {} WHERE {} FOR UPDATE").format(
            positions, key
        )
        self.read = sql.SQL("SELECT cursor, position FROM {} WHERE {}").format(positions, key)
        aside = set_aside_name(options)
        at = sql.SQL(" AND start_position = %s")
        # [start, end) of the batch overlaps the note's range
        overlaps = sql.SQL(" AND start_position < %s AND end_position > %s")
        # The dead letters replayed into [start, end) (their rows are in the table already),
        # read after the position lock in a statement of its own: under READ COMMITTED its
        # snapshot then includes a replay that committed while the lock was awaited.
        self.replayed_in = sql.SQL(
            "SELECT start_position, end_position, next_cursor FROM {} WHERE {}"
            " AND replayed_at IS NOT NULL ORDER BY start_position"
        ).format(aside, key + overlaps)
        # The new position, and the set-aside notes of the range dropped (written in order
        # after all; notes that were replayed stay): one statement, so the exactly-once
        # transaction keeps its round trips.
        self.advance = sql.SQL(
            "WITH written_in_order AS (DELETE FROM {} WHERE {} AND replayed_at IS NULL)"
            " UPDATE {} SET cursor = %s, position = %s, consumer = %s,"
            " rows_written = rows_written + %s, updated_at = now() WHERE {}"
        ).format(aside, key + overlaps, positions, key)
        # Rows the table refused: the range is noted (fenced on the stored position) before
        # the batch goes to the failure policy; written in order later, the note is dropped.
        self.set_aside = sql.SQL(
            "INSERT INTO {} (project, consumer_group, logstore, shard, start_position,"
            " end_position, cursor, next_cursor, error, consumer)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (project, consumer_group, logstore, shard, start_position) DO UPDATE"
            " SET end_position = excluded.end_position, next_cursor = excluded.next_cursor,"
            " error = excluded.error, consumer = excluded.consumer, set_aside_at = now()"
            " WHERE {}.replayed_at IS NULL"
        ).format(aside, aside)
        self.find_set_aside = sql.SQL(
            "SELECT end_position, replayed_at FROM {} WHERE {} FOR UPDATE"
        ).format(aside, key + at)
        self.replayed = sql.SQL(
            "UPDATE {} SET replayed_at = now(), rows_written = %s WHERE {}"
        ).format(aside, key + at)
        self.copy = copy_statement(options)


class PostgresProcessor:
    """The processor of one shard (async: the database waits never hold a thread)."""

    def __init__(
        self,
        options: Options,
        statements: Statements,
        encoder: RowEncoder,
        context: ProcessorContext,
        shard: int,
        metrics: PostgresMetrics,
    ) -> None:
        self.options = options
        self.sql = statements
        self.encoder = encoder
        self.context = context
        self.shard = shard
        self.metrics = metrics
        self.key = (context.project, context.group, context.logstore, shard)
        self.conn: psycopg.AsyncConnection[Any] | None = None
        self._bind = {
            "group": context.group,
            "consumer": context.consumer,
            "shard": shard,
            "table": options.table,
        }

    async def initialize(self, shard: int) -> None:
        await self._with_retry(self._ensure_row)

    async def _ensure_row(self, conn: psycopg.AsyncConnection[Any]) -> None:
        await conn.execute(self.sql.ensure, self.key)

    async def process(self, batch: Batch, tracker: Tracker) -> str | None:
        if batch.group_count == 0 and batch.cursor == batch.next_cursor:
            tracker.save_checkpoint(persist=False)
            return None
        start, end = position(batch.cursor), position(batch.next_cursor)
        written: int | None = None  # rows of the attempt that committed them
        skipped = False  # a replayed dead letter's range was skipped

        async def attempt(conn: psycopg.AsyncConnection[Any]) -> str | None:
            nonlocal written, skipped
            written, skipped = None, False
            async with conn.transaction():
                cur = await conn.execute(self.sql.lock, self.key)
                found = await cur.fetchone()
                stored_cursor, stored = (found[0], found[1]) if found else (None, None)
                if stored is not None and stored == end:
                    return None  # written already (an unknown COMMIT outcome, or a peer)
                if stored is not None and stored > start:
                    return str(stored_cursor)  # the table is ahead: re-read from there
                if found is None:
                    await conn.execute(self.sql.ensure, self.key)
                replayed = await self._replayed_in(conn, start, end)
                reread: str | None = None
                if not replayed:
                    rows = await self._copy(conn, batch)
                    moved_cursor, moved = batch.next_cursor, end
                else:
                    # A dead letter overlapping this range was replayed: its rows are in the
                    # table. Write what comes before it, then move past it.
                    r_start, moved, moved_cursor = replayed[0]
                    rows = 0
                    if r_start > start:
                        rows = await self._copy(conn, self._part(batch, start, start, r_start))
                    if moved != end:
                        reread = moved_cursor  # the rest of the batch, or past its end
                advance = (moved, start, moved_cursor, moved, self.context.consumer, rows)
                await conn.execute(self.sql.advance, (*self.key, *advance, *self.key))
            written, skipped = rows, bool(replayed)
            return reread

        if self.context.replay:
            await self._replay(batch, tracker, start, end)
            return None
        began = time.perf_counter()
        try:
            rollback: str | None = await self._with_retry(attempt, tracker)
        except REFUSED as exc:
            await self._note_set_aside(batch, start, end, exc, tracker)
            if isinstance(exc, BadRow):
                raise
            # The server refused the rows themselves (a CHECK or NOT NULL constraint, a value
            # out of its column's range): the same rows fail the same way every time.
            raise RowsRefused(
                f"PostgreSQL refused the rows of shard {self.shard} at cursor {batch.cursor}: "
                f"{failures.describe(exc, self.options.dsn)[:1000]}"
            ) from exc
        m = self.metrics
        m.seconds.observe(time.perf_counter() - began)
        if skipped:
            outcome = "skipped_replayed"
        elif rollback is not None:
            outcome = "table_ahead"
        else:
            outcome = "already_written" if written is None else "written"
        m.batches.labels(outcome).inc()
        m.rows.inc(written or 0)
        if skipped:
            log.warning(
                "postgres_skipped_replayed",
                **self._bind,
                cursor=batch.cursor,
                rows_written=written,
                next=rollback or batch.next_cursor,
                detail="part of this range was written by `loghubd dead-letters replay`: "
                "those rows are not written again",
            )
        elif rollback is not None:
            log.info("postgres_table_ahead", **self._bind, cursor=batch.cursor, stored=rollback)
        if rollback is not None:
            return rollback
        tracker.save_checkpoint(persist=False)
        return None

    async def _replayed_in(
        self, conn: psycopg.AsyncConnection[Any], start: int, end: int
    ) -> list[tuple[int, int, str]]:
        """The replayed dead letters overlapping [start, end), by start: (start, end, the
        cursor after them). Asked once the position row is locked (see `replayed_in`)."""
        cur = await conn.execute(self.sql.replayed_in, (*self.key, end, start))
        return [(int(a), int(b), str(c)) for a, b, c in await cur.fetchall()]

    def _part(self, batch: Batch, start: int, first: int, stop: int) -> Batch:
        """The log groups of `batch` (read from position `start`) at positions first to
        stop (excluded)."""
        if batch.group_count != position(batch.next_cursor) - start:
            # The source's SPL query dropped whole log groups: which rows lie where cannot
            # be told, and writing them all would write the replayed ones twice.
            raise BatchRejected(
                f"shard {self.shard}, cursor {batch.cursor}: part of this range was written "
                "by a replayed dead letter, and its log groups cannot be placed (the "
                "source's query filtered some out). Nothing is written; the failure policy "
                "decides, and the rows outside the replayed range need loading by hand"
            )
        return batch.part(first - start, stop - start, cursors.encode(first), cursors.encode(stop))

    async def _note_set_aside(
        self, batch: Batch, start: int, end: int, exc: BaseException, tracker: Tracker
    ) -> None:
        """Note the refused range (unless the table is past it: then another consumer owns
        the shard, and this batch is not ours to set aside), so that a replay of its dead
        letter can write it once. A failure to note is logged; the refusal still stands."""

        async def note(conn: psycopg.AsyncConnection[Any]) -> None:
            async with conn.transaction():
                cur = await conn.execute(self.sql.lock, self.key)
                found = await cur.fetchone()
                stored = None if found is None else found[1]
                if stored is None or stored <= start:
                    await conn.execute(
                        self.sql.set_aside,
                        (
                            *self.key,
                            start,
                            end,
                            batch.cursor,
                            batch.next_cursor,
                            str(exc)[:2000],
                            self.context.consumer,
                        ),
                    )

        try:
            await self._with_retry(note, tracker)
        except BatchInterrupted:
            raise  # the shard stops: the next owner is refused the rows too, and notes them
        except Exception as error:
            log.warning(
                "postgres_set_aside_not_noted",
                **self._bind,
                cursor=batch.cursor,
                error=str(error)[:300],
                detail="a replay of this batch's dead letter will be refused",
            )

    async def _replay(self, batch: Batch, tracker: Tracker, start: int, end: int) -> None:
        """A dead letter handed back (`loghubd dead-letters replay`): written once, only if
        this shard set its range aside; the stored position is not touched."""
        outcome = ""
        written = 0

        async def attempt(conn: psycopg.AsyncConnection[Any]) -> None:
            nonlocal outcome, written
            async with conn.transaction():
                # The position row first, as an in-order write locks it: a replay and an
                # in-order write of the same range never interleave.
                await conn.execute(self.sql.ensure, self.key)
                await conn.execute(self.sql.lock, self.key)
                cur = await conn.execute(self.sql.find_set_aside, (*self.key, start))
                found = await cur.fetchone()
                if found is None or found[0] != end:
                    outcome = "unknown" if found is None else "other_range"
                    return
                if found[1] is not None:
                    outcome = "already_replayed"  # an earlier replay whose answer was lost
                    return
                # Other dead letters replayed into this range (its batch was read with other
                # boundaries in another life): their rows are there, write only the rest.
                covered = [(a, b) for a, b, _ in await self._replayed_in(conn, start, end)]
                pieces = uncovered(start, end, covered)
                if pieces == [(start, end)]:
                    written = await self._copy(conn, batch)
                else:
                    written = 0
                    for first, stop in pieces:
                        written += await self._copy(conn, self._part(batch, start, first, stop))
                await conn.execute(self.sql.replayed, (written, *self.key, start))
                outcome = "replayed"

        await self._with_retry(attempt, tracker)
        if outcome in ("unknown", "other_range"):
            raise NotSetAside(
                f"shard {self.shard}, cursor {batch.cursor}: this range is not noted as set "
                f"aside in {self.options.positions_table}_set_aside"
                + (" with the same end" if outcome == "other_range" else "")
                + ": it may be in the table already (written in order after a retry); or "
                "the failure policy took it for an error other than a refusal of its rows "
                "(the letter's error says which), or an earlier version of this plugin set "
                "it aside without a note. It is not written; `loghubd dead-letters print` "
                "gives its logs to check and load by hand"
            )
        self.metrics.batches.labels(outcome).inc()
        self.metrics.rows.inc(written)
        log.info("postgres_replayed", **self._bind, cursor=batch.cursor, outcome=outcome)
        tracker.save_checkpoint(persist=False)

    async def _copy(self, conn: psycopg.AsyncConnection[Any], batch: Batch) -> int:
        """COPY the batch's rows, converted in a worker thread (CPU work, off the event loop
        that runs the heartbeat) a piece at a time: the server parses one piece while the
        next is converted."""
        pieces = self.encoder.chunks(batch.logs(), CHUNK_ROWS)
        rows = 0
        async with conn.cursor().copy(self.sql.copy) as copy:
            while True:
                piece = await anyio.to_thread.run_sync(next, pieces, None)
                if piece is None:
                    break
                await copy.write(piece[0])
                rows += piece[1]
        return rows

    async def shutdown(self, tracker: Tracker) -> None:
        if self.conn is not None:
            await self.conn.close()
            self.conn = None

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        if self.conn is None or self.conn.closed:
            conn = await psycopg.AsyncConnection.connect(
                self.options.dsn,
                autocommit=True,
                connect_timeout=max(1, int(self.options.connect_timeout_s)),
                application_name=f"loghubd {self.context.consumer} shard {self.shard}",
            )
            # A lock on the table (an ALTER TABLE, a VACUUM FULL, a LOCK TABLE left open) was
            # waited on without a word, for as long as it was held (postgres audit): past
            # `lock_timeout_s` the statement fails, is logged (`postgres_retry`,
            # LockNotAvailable) and is tried again. Kept only once set: a connection without
            # it would wait silently again.
            ms = max(1, round(self.options.lock_timeout_s * 1000))
            try:
                await conn.execute(sql.SQL("SET lock_timeout = {}").format(sql.Literal(ms)))
            except BaseException:
                await conn.close()
                raise
            self.conn = conn
        return self.conn

    async def _with_retry(self, fn: Any, tracker: Tracker | None = None) -> Any:
        """Run `fn(conn)`; retry what a retry can settle (`failures.kind_of`), with backoff,
        for ever, or until the shard stops (`BatchInterrupted`). A lost connection is made
        again; a statement that could not finish now, or a batch the database refuses until
        someone changes it (a GRANT, a table or column put back), is run again as it is. The
        start of a shard (no tracker) retries lost connections only: anything else fails the
        start, which the daemon retries with backoff, saying why in /readyz. Each failure is
        told to the daemon (`tracker.note_problem`: /status, /readyz); once the call gets
        through, `postgres_available_again` (after lost connections) or
        `postgres_retry_succeeded` says so."""
        stopping = None if tracker is None else tracker.stopping
        attempt = 0
        lost_connection = False
        while True:
            try:
                if stopping is None:
                    result = await fn(await self._connect())
                else:
                    result = await self._cut_when_stuck(fn, stopping)
                if attempt:
                    event = (
                        "postgres_available_again"
                        if lost_connection
                        else "postgres_retry_succeeded"
                    )
                    log.info(event, **self._bind, attempts=attempt)
                    if tracker is not None:
                        tracker.note_problem("")
                return result
            except psycopg.Error as exc:
                kind = failures.kind_of(exc)
                if kind is None or (tracker is None and kind is not Kind.CONNECTION):
                    raise
                attempt += 1
                wait = Backoff(
                    initial=self.options.retry_initial_backoff_s,
                    cap=self.options.retry_max_backoff_s,
                    jitter=0.5,
                ).wait(attempt)
                error = failures.describe(exc, self.options.dsn)[:500]
                what = self._retried(exc, kind, attempt, wait, error)
                if kind is Kind.CONNECTION:
                    lost_connection = True
                    if self.conn is not None:
                        await self.conn.close()
                        self.conn = None
                if tracker is not None:
                    tracker.note_problem(
                        f"{what} ({attempt} failure(s) in a row; retrying in {wait:.1f}s): "
                        f"{error[:300]}"
                    )
                if stopping is None:
                    await anyio.sleep(wait)
                    continue
                with anyio.move_on_after(wait):
                    await stopping.wait()
                if stopping.is_set():
                    raise BatchInterrupted(
                        f"{what} when the shard began to stop, after {attempt} attempts: "
                        f"{error[:300]}"
                    ) from None

    def _retried(
        self, exc: psycopg.Error, kind: Kind, attempt: int, wait: float, error: str
    ) -> str:
        """Count and log one failure to be retried; what it is, in words."""
        if kind is Kind.CONNECTION:
            self.metrics.unavailable.inc()
            log.warning(
                "postgres_unavailable",
                **self._bind,
                attempt=attempt,
                retry_in_s=round(wait, 2),
                error=error[:300],
            )
            return "PostgreSQL unavailable"
        reason = failures.condition(exc)
        self.metrics.retries.labels(reason).inc()
        if kind is Kind.BLOCKED:
            what = (
                f"PostgreSQL refuses the batch ({reason}) until the database is changed "
                "(a GRANT, a table or column put back); nothing is dead-lettered meanwhile"
            )
        else:
            what = f"PostgreSQL could not finish the batch now ({reason})"
        log.warning(
            "postgres_retry",
            **self._bind,
            reason=reason,
            sqlstate=exc.sqlstate,
            blocked=kind is Kind.BLOCKED,
            attempt=attempt,
            retry_in_s=round(wait, 2),
            error=error,
        )
        return what

    async def _cut_when_stuck(self, fn: Any, stopping: StopSignal) -> Any:
        """`fn(conn)`, given up if it has not returned `STOP_PATIENCE_S` after the shard began
        to stop (a black-holed network, a lock held by a stuck peer): `BatchInterrupted`, the
        connection closed, the transaction rolled back by the server or, if its COMMIT was
        under way, settled by the next owner's position check. A healthy attempt finishes."""

        async def call() -> Any:
            return await fn(await self._connect())

        finished, value = await until_stopping(stopping, call, patience=STOP_PATIENCE_S)
        if finished:
            return value
        if self.conn is not None:
            await self.conn.close()
            self.conn = None
        raise BatchInterrupted(
            f"shard {self.shard}: a PostgreSQL call had not returned {STOP_PATIENCE_S:g} s "
            "after the shard began to stop; given up (nothing of it is committed twice: the "
            "next owner's position check settles it)"
        )
