"""`Batch.arrow()`: a batch as one pyarrow.RecordBatch with its fields as columns.

Two ways, same result. The C extension `_fastarrow` (its `fields`), when it was built, writes
the columns below straight from the wire bytes, without the GIL: the field columns too, each
with its validity bitmap, so no Python object per log and no map layout in between. A batch it
does not take (a string that is not UTF-8, malformed data, thousands of distinct fields) and
every batch when it is missing (`LOGHUBD_NO_C=1`) go the Python way: `loghubd.arrow.convert`
(the map layout), whose `contents` map is then pivoted into one column per field with
vectorised Arrow kernels. The schema (docs/batch-views.md):

| column | type | |
|---|---|---|
| `__time__` | timestamp[us, UTC] | the log's time (seconds + the ns part, to the µs) |
| `__time_ns__` | int64 | the same in ns since the epoch |
| `__topic__`, `__source__` | string | the log group's |
| `__tags__` | map<string, string> | the log group's tags (without the `__tag__:` prefix) |
| `__shard__` | int32 | |
| `__cursor__` | string | the cursor of the row's own log group (see loghubd/arrow.py) |
| one per field | string | null where a log does not have the field |

Field columns follow the fixed ones, in order of first appearance in the batch, or exactly
the `fields` asked for (in that order; a field no log has is an all-null column, a field not
asked for is left out), which gives every batch the same schema. A field whose name is one
of the fixed columns' goes to `__field__:<name>`. A field repeated within one log keeps its
last value (as `logs()` does). Values that are not UTF-8 keep their bytes readable as
backslash escapes (`\\xff`), as in loghubd/arrow.py.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import cast

import pyarrow as pa
import pyarrow.compute as pc

from loghubd import arrow
from loghubd.native import load_extension
from loghubd.protocol import cursor as cursors

FIXED = (
    "__time__",
    "__time_ns__",
    "__topic__",
    "__source__",
    "__tags__",
    "__shard__",
    "__cursor__",
)
FIXED_SCHEMA = pa.schema(
    [
        pa.field("__time__", arrow.TIMESTAMP),
        pa.field("__time_ns__", pa.int64()),
        pa.field("__topic__", pa.string()),
        pa.field("__source__", pa.string()),
        pa.field("__tags__", arrow.MAP),
        pa.field("__shard__", pa.int32()),
        pa.field("__cursor__", pa.string()),
    ]
)
# the columns of loghubd.arrow.SCHEMA that become the fixed columns, in FIXED's order
_FROM = ("__time__", "__time_ns__", "__topic__", "__source__", "__tags__", "shard", "cursor")
RENAMED = "__field__:"

# _fastarrow.fields(raw, wanted, allocate) -> None (not taken) | (rows per group, field names,
# null count per field, data, sections), see _fastarrow.c
CFields = Callable[
    [bytes | memoryview, list[str] | None, Callable[[int], pa.Buffer]],
    tuple[list[int], list[str], list[int], pa.Buffer, tuple[tuple[int, int], ...]] | None,
]


def _load_c() -> CFields | None:
    extension = load_extension("loghubd._fastarrow")
    return None if extension is None else cast(CFields, extension.fields)


# The C converter, or None for the Python path (tests set it to None to compare the two).
c_fields: CFields | None = _load_c()

# One C conversion at a time per process. `fields` parses without the GIL, and its scratch
# buffers (tens of MB for a large batch) are kept for the next call; shards converting at once
# in worker threads each made fresh ones instead, whose page faults cost more than the parsing
# (8 threads: 33 faults per 1000 logs, 458 ns/log against 243 one at a time). A thread waiting
# here does not hold the GIL; more cores are used with `loghubd run --workers N`. Reentrant: a
# call made while converting (from a finalizer, say) allocates its own buffers and goes on.
_c_turn = threading.RLock()


def column_name(field: str) -> str:
    """The column of a field: its name, unless a fixed column has it."""
    return RENAMED + field if field in FIXED else field


def fields_batch(
    shard: int, cursor: str, next_cursor: str, raw: bytes, fields: Sequence[str] | None = None
) -> pa.RecordBatch:
    """The RecordBatch of `Batch.arrow()` for a batch's bytes (see the module docstring)."""
    fast = c_fields
    if fast is not None:
        wanted = None if fields is None else list(dict.fromkeys(fields))
        with _c_turn:
            out = fast(raw, wanted, pa.allocate_buffer)
        if out is not None:
            return _from_c(shard, cursor, next_cursor, out, fields)
    groups = arrow.split_log_groups(raw)
    per_group = arrow.steps_per_group(cursor, next_cursor, len(groups)) is not None
    table = arrow.convert(shard, cursor, raw, per_group=per_group).table.combine_chunks()
    n = table.num_rows
    fixed = [
        _single(table.column(name), FIXED_SCHEMA.field(i).type) for i, name in enumerate(_FROM)
    ]
    contents = _single(table.column("contents"), arrow.MAP)
    columns = pivot(contents, n)
    names = list(columns) if fields is None else list(fields)
    empty = pa.nulls(n, pa.string())
    arrays = fixed + [columns.get(f, empty) for f in names]
    schema = pa.schema(list(FIXED_SCHEMA) + [pa.field(column_name(f), pa.string()) for f in names])
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _from_c(
    shard: int,
    cursor: str,
    next_cursor: str,
    out: tuple[list[int], list[str], list[int], pa.Buffer, tuple[tuple[int, int], ...]],
    fields: Sequence[str] | None,
) -> pa.RecordBatch:
    """The RecordBatch over the buffers of `_fastarrow.fields` (no copy)."""
    rows, names, nulls, data, sections = out
    n = sum(rows)
    b = [data.slice(at, size) for at, size in sections]
    base = arrow.steps_per_group(cursor, next_cursor, len(rows))
    group_cursors = (
        [cursor] * len(rows)
        if base is None
        else [cursors.encode(base + g) for g in range(len(rows))]
    )
    fixed = [
        pa.Array.from_buffers(arrow.TIMESTAMP, n, [None, b[0]]),
        pa.Array.from_buffers(pa.int64(), n, [None, b[1]]),
        arrow.c_strings(n, b[2], b[3]),
        arrow.c_strings(n, b[4], b[5]),
        arrow.c_map(n, b[6:11]),
        pa.repeat(pa.scalar(shard, pa.int32()), n),
        arrow.cursor_column(group_cursors, rows),
    ]
    columns = {
        name: arrow.c_strings(n, b[at + 1], b[at + 2], b[at] if nulls[j] else None, nulls[j])
        for j, (name, at) in enumerate(zip(names, range(11, len(b), 3), strict=True))
    }
    wanted = names if fields is None else list(fields)
    schema = pa.schema(list(FIXED_SCHEMA) + [pa.field(column_name(f), pa.string()) for f in wanted])
    return pa.RecordBatch.from_arrays(fixed + [columns[f] for f in wanted], schema=schema)


def _single(column: pa.ChunkedArray, type_: pa.DataType) -> pa.Array:
    if column.num_chunks == 1:
        return column.chunk(0)
    if column.num_chunks == 0:
        return pa.array([], type_)
    return pa.concat_arrays(column.chunks)


def pivot(contents: pa.MapArray, n: int) -> dict[str, pa.Array]:
    """One string array of `n` rows per key of the map column, keys in order of first
    appearance, null where a row lacks the key, the last value where a row repeats it."""
    if len(contents) == 0:
        return {}
    keys, items = contents.keys, contents.items  # flattened: entry 0 is the first row's
    offsets = contents.offsets
    if offsets[0].as_py():  # a slice: count from its own first entry
        offsets = pc.subtract(offsets, offsets[0])
    lists = pa.ListArray.from_arrays(offsets, keys)  # map kernels are list kernels
    lengths = pc.list_value_length(lists)
    low, high = pc.min_max(lengths).values()
    width = high.as_py()
    if low.as_py() == width and width:
        # The usual case: every log has the same fields in the same order. Column j is every
        # `width`-th entry from j: one take per field, no hashing.
        first = keys.slice(0, width).to_pylist()
        if len(set(first)) == width:
            starts = offsets.slice(0, n)
            out: dict[str, pa.Array] = {}
            for j, key in enumerate(first):
                at = pc.add(starts, j)
                if not pc.all(pc.equal(pc.take(keys, at), key)).as_py():
                    break
                out[key] = pc.take(items, at)
            else:
                return out
    return _pivot_general(lists, lengths, items, n)


def _pivot_general(
    lists: pa.ListArray, lengths: pa.Array, items: pa.Array, n: int
) -> dict[str, pa.Array]:
    keys = lists.values
    parents = pc.list_parent_indices(lists)
    rows = pc.cast(pc.indices_nonzero(pc.is_valid(lengths)), pa.int64())
    empty = pa.nulls(n, pa.string())
    out: dict[str, pa.Array] = {}
    for key in pc.unique(keys).to_pylist():  # in order of first appearance
        where = pc.equal(keys, key)
        at, values = pc.filter(parents, where), pc.filter(items, where)
        if len(at) > 1:  # a row that repeats the key keeps its last value
            last = pc.not_equal(at.slice(0, len(at) - 1), at.slice(1))
            keep = pa.concat_arrays([last, pa.array([True])])
            at, values = pc.filter(at, keep), pc.filter(values, keep)
        mask = pc.is_in(rows, value_set=at)
        out[key] = pc.replace_with_mask(empty, mask, values)
    return out
