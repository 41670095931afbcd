"""Where the `parquet` processor's rows go: the partition template, applied to Arrow columns.

Pure: no I/O. A template is a relative path with placeholders, e.g. the default
`{logstore}/dt={date}/hour={hour}/`:

| placeholder | value |
|---|---|
| `{project}`, `{logstore}`, `{shard}` | where the rows come from |
| `{date}` (YYYY-MM-DD), `{year}`, `{month}`, `{day}`, `{hour}`, `{minute}` | `__time__`, UTC |
| `{topic}`, `{source}` | the log group's `__topic__` / `__source__` |
| any other name | that field of the log (`__HIVE_DEFAULT_PARTITION__` when a log lacks it) |

Values from logs are made safe as one path segment: characters other than letters, digits,
`_`, `-`, `.`, `=` become `_`, and a leading `.` does too (no `..`, no hidden directory).
"""

from __future__ import annotations

import string
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from loghubd.arrow_view import column_name

DEFAULT_TEMPLATE = "{logstore}/dt={date}/hour={hour}/"
NULL_VALUE = "__HIVE_DEFAULT_PARTITION__"
SOURCE_KEYS = ("project", "logstore", "shard")
TIME_FORMATS = {
    "date": "%Y-%m-%d",
    "year": "%Y",
    "month": "%m",
    "day": "%d",
    "hour": "%H",
    "minute": "%M",
}
GROUP_COLUMNS = {"topic": "__topic__", "source": "__source__"}
_UNSAFE = r"[^A-Za-z0-9_\-.=]"


@dataclass(frozen=True, slots=True)
class Template:
    """A parsed template: literal text and placeholder names, alternating."""

    pieces: tuple[tuple[str, str | None], ...]  # (literal, placeholder or None)

    @property
    def fields(self) -> list[str]:
        """The log fields the template reads (placeholders that are not built in)."""
        builtin = {*SOURCE_KEYS, *TIME_FORMATS, *GROUP_COLUMNS}
        return [name for _, name in self.pieces if name is not None and name not in builtin]


def parse_template(text: str) -> Template:
    """Check a template; ValueError saying what is wrong with it."""
    if text.startswith("/") or "\\" in text:
        raise ValueError(f"{text!r}: must be a relative path with / separators")
    pieces: list[tuple[str, str | None]] = []
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as exc:
        raise ValueError(f"{text!r}: {exc}") from None
    for literal, name, spec, conversion in parsed:
        if ".." in literal.split("/"):
            raise ValueError(f"{text!r}: '..' is not allowed")
        if name is not None and (not name or spec or conversion):
            raise ValueError(f"{text!r}: placeholders are plain names, like {{hour}}")
        pieces.append((literal, name))
    return Template(tuple(pieces))


def partition_keys(
    template: Template, table: pa.Table, *, project: str, logstore: str, shard: int
) -> pa.ChunkedArray | str:
    """Each row's partition directory (relative, ending in `/` if the template does), or one
    string when the template does not depend on the rows."""
    source = {"project": project, "logstore": logstore, "shard": str(shard)}
    parts: list[pa.ChunkedArray | str] = []
    per_row = False
    for literal, name in template.pieces:
        if literal:
            parts.append(literal)
        if name is None:
            continue
        if name in source:
            parts.append(_safe_text(source[name]))
        elif name in TIME_FORMATS:
            parts.append(pc.strftime(table.column("__time__"), format=TIME_FORMATS[name]))
            per_row = True
        else:
            column = GROUP_COLUMNS.get(name, column_name(name))
            if column in table.column_names:
                values = pc.cast(table.column(column), pa.string())
            else:
                values = pa.chunked_array([pa.nulls(table.num_rows, pa.string())])
            parts.append(_safe(values))
            per_row = True
    if not per_row:
        return "".join(p for p in parts if isinstance(p, str))
    arrays = [p if not isinstance(p, str) else pa.scalar(p) for p in parts]
    if len(arrays) == 1:
        only = arrays[0]
        assert isinstance(only, pa.ChunkedArray)
        return only
    return pc.binary_join_element_wise(*arrays, "")


def _safe(values: pa.ChunkedArray) -> pa.ChunkedArray:
    values = pc.fill_null(values, NULL_VALUE)
    values = pc.replace_substring_regex(values, pattern=_UNSAFE, replacement="_")
    values = pc.replace_substring_regex(values, pattern=r"^\.", replacement="_")
    return pc.if_else(pc.equal(values, ""), NULL_VALUE, values)


def _safe_text(value: str) -> str:
    out = pc.replace_substring_regex(pa.array([value]), pattern=_UNSAFE, replacement="_")
    text = str(out[0].as_py())
    return "_" + text[1:] if text.startswith(".") else text or NULL_VALUE


def split(keys: pa.ChunkedArray | str, table: pa.Table) -> list[tuple[str, pa.Table]]:
    """The rows of `table` grouped by partition directory, in order of first appearance."""
    if isinstance(keys, str):
        return [(keys, table)]
    unique = pc.unique(keys)
    if len(unique) == 1:
        return [(str(unique[0].as_py()), table)]
    return [(str(k.as_py()), table.filter(pc.equal(keys, k))) for k in unique]
