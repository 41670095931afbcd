"""Value types shared across layers: what a processor receives.

A `Batch` offers three views of its logs (docs/batch-views.md gives their cost per log):
`logs()` (one dict per log), `jsonl()` / `jsonl_chunks()` (JSON lines as bytes) and `arrow()`
(a pyarrow.RecordBatch, loghubd/arrow.py). The last two are built from the wire bytes without a
Python object per log when the C extensions are there.

`Batch.logs()` builds its records with the optional C extension `loghubd._fastlog` when it
was compiled at install time (several times faster than reading the upb messages from
Python), and with the pure Python path otherwise; `Batch.log_count` counts them with it too,
from the wire bytes, without a protobuf parse. Set the environment variable `LOGHUBD_NO_C=1`
to ignore the extension (read once, at import): the two paths yield the same records and
counts, so this is for comparing them and for testing the Python path.

The protobuf classes (`loghubd.protocol.pb`) are imported by the Python path when it first
runs, not with this module: a daemon whose batches the C extensions read never builds them.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from loghubd.files import write_all
from loghubd.native import load_extension
from loghubd.protocol.framing import decode_varint

if TYPE_CHECKING:
    import pyarrow as pa

Record = dict[str, Any]


_fastlog = load_extension("loghubd._fastlog")
_fastjsonl = load_extension("loghubd._fastjsonl")

# Records the C path decodes at a time (whole log groups: a chunk may hold a few more).
CHUNK_LOGS = 2000
# Bytes of JSON lines per chunk of `jsonl_chunks()` (whole log groups: a chunk may hold more).
CHUNK_BYTES = 1 << 20


@dataclass(slots=True)
class Batch:
    """The log groups of one PullLogs answer for one shard.

    Decoding is lazy and happens wherever the processor first touches the data (a worker
    thread for sync processors), never on the event loop that runs the heartbeat.
    """

    shard: int
    cursor: str  # where this batch was read from
    next_cursor: str  # the position after it
    raw: bytes  # serialized LogGroupList
    group_count: int
    raw_size: int = 0
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def log_group_list(self) -> Any:
        """The parsed LogGroupList (protobuf). Values that are not UTF-8 use the Raw schema
        (bytes values), the way the SDK falls back."""
        from loghubd.protocol import pb

        lgl = self._cache.get("lgl")
        if lgl is None:
            try:
                lgl = pb.LogGroupList.FromString(self.raw)
                # upb checks UTF-8 of proto2 strings only when a value is read: read them.
                for g in lgl.LogGroups:
                    for log in g.Logs:
                        for c in log.Contents:
                            c.Value  # noqa: B018
            except (UnicodeDecodeError, pb.DecodeError):
                lgl = pb.LogGroupListRaw.FromString(self.raw)
            self._cache["lgl"] = lgl
        return lgl

    def logs(self) -> Iterator[Record]:
        """Each log as a flat dict: `__time__`, `__topic__`, `__source__`, `__tag__:<key>`,
        then the contents (the SDK's flattened form). Built one at a time, on demand.

        With the C extension, the batch is decoded straight from the wire bytes in chunks of
        whole log groups (`CHUNK_LOGS` records or a little more), one chunk per `next()` that
        needs it, so that a processor that drops each record never holds the whole batch;
        values that are not UTF-8 are kept losslessly (surrogateescape). Bytes it refuses
        (malformed, or a key, tag or topic that is not UTF-8) take the Python path, after the
        records already yielded.

        The Python path reads the UTF-8 schema without a validation pass; if a value turns out
        not to be UTF-8, iteration continues on the Raw schema after the records already
        yielded, and non-UTF-8 bytes are kept losslessly (surrogateescape)."""
        # A chain over the chunks: the next record is the list iterator's, a C call, rather
        # than a generator frame resumed for each record (~16 ns a record).
        return itertools.chain.from_iterable(self._log_chunks())

    def _log_chunks(self) -> Iterator[Iterable[Record]]:
        """`logs()`'s records in chunks: the C extension's lists, then (when it refuses the
        rest, or is not there) the Python path's records after those already given."""
        done = 0
        if _fastlog is not None:
            offset, end = 0, len(self.raw)
            while offset < end:
                try:
                    records, offset = _fastlog.decode_chunk(self.raw, offset, CHUNK_LOGS)
                except ValueError:
                    break  # the Python path decides, exactly as without the extension
                if offset == end:  # the last chunk: the count is known
                    self._cache["log_count"] = done + len(records)
                yield records
                done += len(records)
                del records  # the next chunk is decoded without this one alive
            else:
                self._cache["log_count"] = done
                return
        yield self._python_logs(done)

    def _python_logs(self, skip: int) -> Iterator[Record]:
        """The records of the Python path, after the first `skip` (yielded by the C path)."""
        from loghubd.protocol import pb

        lgl = self._cache.get("lgl")
        if lgl is None:
            try:
                lgl = pb.LogGroupList.FromString(self.raw)
            except pb.DecodeError:
                lgl = pb.LogGroupListRaw.FromString(self.raw)
        done = 0
        try:
            for record in _flatten(lgl):
                if done >= skip:
                    yield record
                done += 1
        except UnicodeDecodeError:
            raw = pb.LogGroupListRaw.FromString(self.raw)
            self._cache["lgl"] = raw
            for i, record in enumerate(_flatten(raw)):
                if i >= done:
                    yield record
                    done += 1
        else:
            self._cache.setdefault("lgl", lgl)
        self._cache["log_count"] = done  # every log was yielded

    def jsonl_chunks(self, max_bytes: int = CHUNK_BYTES) -> Iterator[bytes]:
        """The logs as JSON lines, in chunks of whole lines of about `max_bytes` each (the C
        path ends a chunk after the log group that reaches `max_bytes`; the Python path after
        the log that does), so that a writer never holds the whole batch's text.

        Each line is `json.dumps(record) + "\\n"` for a record of `logs()`, in order: ASCII
        only (other characters as `\\uXXXX` escapes, values that are not UTF-8 as the
        surrogate escapes `\\udc80`..`\\udcff` of their bytes), keys in the order of `logs()`.
        The C extension `_fastjsonl` writes them straight from the wire bytes, with the GIL
        released; bytes it refuses take the Python twin from the log where it stopped, which
        then decides exactly as `logs()` does (so the output is the same either way)."""
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be positive, not {max_bytes}")
        done = 0
        if _fastjsonl is not None:
            offset, end = 0, len(self.raw)
            while offset < end:
                try:
                    data, offset, n = _fastjsonl.encode_chunk(self.raw, offset, max_bytes)
                except ValueError:
                    break  # the Python path decides, from the first log not yet written
                done += n
                if data:
                    yield data
            else:
                self._cache["log_count"] = done
                return
        yield from _jsonl_py(self.logs(), done, max_bytes)

    def write_jsonl(self, fd: int, max_bytes: int = CHUNK_BYTES) -> int:
        """Write `jsonl_chunks(max_bytes)` to the file descriptor `fd`, chunk by chunk, and
        return how many bytes that was: the same bytes in the same writes, without a `bytes`
        object per chunk on the C path (it writes from its own buffer, with the GIL released).

        On an OSError part of the lines may be in the file: the caller cuts back to where it
        was (the `jsonl` processor does; its retry starts from there)."""
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be positive, not {max_bytes}")
        done = written = 0
        if _fastjsonl is not None:
            offset, end = 0, len(self.raw)
            while offset < end:
                try:
                    size, offset, n = _fastjsonl.write_chunk(self.raw, offset, max_bytes, fd)
                except ValueError:
                    break  # nothing of this chunk was written: the Python path goes on
                done += n
                written += size
            else:
                self._cache["log_count"] = done
                return written
        for chunk in _jsonl_py(self.logs(), done, max_bytes):
            write_all(fd, chunk)
            written += len(chunk)
        return written

    def jsonl(self) -> bytes:
        """All of `jsonl_chunks()` as one bytes object (for small batches and tests; a
        writer should take the chunks)."""
        return b"".join(self.jsonl_chunks())

    def arrow(self, fields: Sequence[str] | None = None) -> pa.RecordBatch:
        """The logs as one `pyarrow.RecordBatch`: the fixed columns, then one string column per
        field (loghubd/arrow_view.py and docs/batch-views.md say which and how a
        field set that varies from log to log is laid out). `fields`: exactly these field
        columns, in this order (a stable schema across batches); None: every field of the
        batch, in order of first appearance."""
        from loghubd import arrow_view  # pyarrow costs ~0.2 s to import: only when used

        rows = arrow_view.fields_batch(self.shard, self.cursor, self.next_cursor, self.raw, fields)
        self._cache["log_count"] = rows.num_rows  # a row per log: the daemon need not count
        return rows

    def part(self, first: int, stop: int, cursor: str, next_cursor: str) -> Batch:
        """A batch of this one's log groups `first` to `stop` (excluded), read from `cursor`
        and followed by `next_cursor` (which the caller knows: the cursors of those groups).
        The wire bytes are sliced, nothing is decoded. For a processor that must write part
        of a batch (`loghubd-postgres`, where a replayed dead letter overlaps it)."""
        if not 0 <= first <= stop <= self.group_count:
            raise ValueError(f"part({first}, {stop}) of a batch of {self.group_count} log groups")
        data, pos, begin = self.raw, 0, 0
        for index in range(stop):
            if index == first:
                begin = pos
            if data[pos] != 0x0A:  # LogGroupList field 1, length-delimited
                raise ValueError(f"not a log group record at byte {pos} of the batch")
            length, pos = decode_varint(data, pos + 1)
            pos += length
        if first == stop:
            begin = pos
        if pos > len(data):
            raise ValueError("the batch's last log group is cut short")
        return Batch(self.shard, cursor, next_cursor, bytes(data[begin:pos]), stop - first)

    @property
    def log_count(self) -> int:
        """The number of logs in the batch, computed once (or known from `logs()`).

        With the C extension, `_fastlog.count_logs` walks the wire bytes without making an
        object per log (~7x cheaper than the upb parse here); bytes it refuses (exactly those
        `logs()` would send to the Python path) are counted by the Python path, which counts
        or raises as without the extension."""
        count = self._cache.get("log_count")
        if count is None:
            count = self._cache["log_count"] = self._count_logs()
        return int(count)

    def _count_logs(self) -> int:
        lgl = self._cache.get("lgl")  # parsed already (`log_group_list`): no need to walk
        if lgl is None and _fastlog is not None:
            try:
                return int(_fastlog.count_logs(self.raw))
            except ValueError:
                pass  # the Python path decides, exactly as without the extension
        # Counting reads no string, so it needs no UTF-8 checks: the bytes schema parses
        # without them (4x cheaper than `log_group_list`).
        if lgl is None:
            from loghubd.protocol import pb

            lgl = pb.LogGroupListRaw.FromString(self.raw)
        return sum(len(g.Logs) for g in lgl.LogGroups)

    @property
    def known_log_count(self) -> int | None:
        """`log_count` if it is already known (the processor counted or decoded the logs),
        else None: reading it never decodes anything."""
        count = self._cache.get("log_count")
        return None if count is None else int(count)


def _jsonl_py(records: Iterator[Record], skip: int, max_bytes: int) -> Iterator[bytes]:
    """The Python twin of `_fastjsonl.encode_chunk`: JSON lines of `records` after the first
    `skip`, in chunks of about `max_bytes`."""
    dumps = json.dumps
    parts: list[str] = []
    size = 0
    for i, record in enumerate(records):
        if i < skip:
            continue
        line = dumps(record) + "\n"
        parts.append(line)
        size += len(line)  # ASCII only: characters are bytes
        if size >= max_bytes:
            yield "".join(parts).encode()
            parts, size = [], 0
    if parts:
        yield "".join(parts).encode()


def _flatten(lgl: Any) -> Iterator[Record]:
    for group in lgl.LogGroups:
        base: Record = {"__topic__": group.Topic, "__source__": group.Source}
        for tag in group.LogTags:
            base["__tag__:" + tag.Key] = tag.Value
        for log in group.Logs:
            record: Record = {"__time__": log.Time}
            if log.Time_ns:
                record["__time_ns_part__"] = log.Time_ns
            record.update(base)
            for content in log.Contents:
                value = content.Value
                if value.__class__ is bytes:  # Raw schema: keep every byte
                    value = value.decode("utf-8", "surrogateescape")
                record[content.Key] = value
            yield record
