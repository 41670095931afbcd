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
`_`, `-`, `.` become `_`, and a leading `.` does too (no `..`, no hidden directory). `=`
too: a directory `x=y` made by a value would read as a hive partition `x`, and every
`hive_partitioning` query of the lake would fail on it (file sinks audit).

A log field named as a hive key of the template (`hour` under `.../hour={hour}/`) is written
as `__field__:hour` (`shadowed`, `unshadow`): a hive-partitioned reader (DuckDB, Spark)
would show the partition's value under its name instead, silently. Also when the key's
placeholder is that very field (`region={region}/`): the directory holds the value made safe
(`us/east 1` as `us_east_1`, cut and hashed when long), so the column keeps the log's own. A
value longer than `MAX_VALUE_BYTES` is cut to its first `KEEP_BYTES` characters plus `-` and
the first 16 hex digits of the SHA-256 of the whole (original) value: a file name is at most
255 bytes, and a longer one would fail every write of the shard (ENAMETOOLONG) for ever.
"""

from __future__ import annotations

import difflib
import hashlib
import string
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from loghubd.arrow_view import RENAMED, column_name

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
BUILTIN = (*SOURCE_KEYS, *TIME_FORMATS, *GROUP_COLUMNS)  # every other placeholder is a field
_UNSAFE = r"[^A-Za-z0-9_\-.]"
# A value's longest form in a path segment; longer ones keep KEEP_BYTES and a hash. Leaves
# room in the 255 bytes of a name for the template's literal text around the placeholder.
MAX_VALUE_BYTES = 120
KEEP_BYTES = MAX_VALUE_BYTES - 17  # + "-" + 16 hex digits


@dataclass(frozen=True, slots=True)
class Template:
    """A parsed template: literal text and placeholder names, alternating."""

    pieces: tuple[tuple[str, str | None], ...]  # (literal, placeholder or None)

    @property
    def fields(self) -> list[str]:
        """The log fields the template reads (placeholders that are not built in)."""
        return [name for _, name in self.pieces if name is not None and name not in BUILTIN]


def likely_typos(template: Template) -> list[tuple[str, str]]:
    """Field placeholders that look like a misspelt built-in one (`{datee}`, `{Hour}`,
    `{__time__}`), each with the built-in it resembles."""
    out = []
    for name in dict.fromkeys(template.fields):  # none of them is a built-in
        plain = name.strip("_").lower()
        close = ["date"] if plain == "time" else difflib.get_close_matches(plain, BUILTIN, 1, 0.8)
        if close:
            out.append((name, close[0]))
    return out


def shadowed(template: Template) -> frozenset[str]:
    """The hive keys of `template` (`key` of a `key={placeholder}` path segment): a column
    of that name would be hidden by the directory's value, which is another value (`hour`
    of `__time__` for a log's own `hour`) or the same made safe for a path."""
    keys = set()
    for literal, name in template.pieces:
        if name is None or not literal.endswith("="):
            continue
        key = literal[:-1].rsplit("/", 1)[-1]
        if key:
            keys.add(key)
    return frozenset(keys)


def unshadow(table: pa.Table, keys: frozenset[str]) -> pa.Table:
    """`table` with its columns named as one of `keys` renamed `__field__:<name>`."""
    if not keys or keys.isdisjoint(table.column_names):
        return table
    return table.rename_columns([RENAMED + c if c in keys else c for c in table.column_names])


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


def partitions(
    template: Template, table: pa.Table, *, project: str, logstore: str, shard: int
) -> list[tuple[str, pa.Table]]:
    """The rows of `table` grouped by partition directory (relative, ending in `/` if the
    template does), in order of first appearance.

    Rows share few distinct values (a batch spans seconds, not days), so each placeholder is
    computed on the distinct values of its column (dictionary encoding), not row by row; a
    row's partition is the mixed-radix number of its dictionary indices."""
    source = {"project": project, "logstore": logstore, "shard": str(shard)}
    literal: list[str | None] = []  # per piece: text, or None for a per-row part
    dictionaries: list[list[str]] = []
    codes: pa.Array | None = None
    encoded: dict[str, pa.DictionaryArray] = {}
    for text, name in template.pieces:
        literal.append(text)
        if name is None:
            continue
        if name in source:
            literal.append(_safe_text(source[name]))
            continue
        if name in TIME_FORMATS:
            column = "__time__"
        else:
            column = GROUP_COLUMNS.get(name, column_name(name))
        if column not in table.column_names:
            literal.append(NULL_VALUE)
            continue
        if column not in encoded:
            if column == "__time__":
                encoded[column] = _encode_time(table.column(column), _time_unit(template))
            else:
                encoded[column] = pc.dictionary_encode(table.column(column).combine_chunks())
        dictionary = encoded[column]
        if name in TIME_FORMATS:
            values = pc.strftime(dictionary.dictionary, format=TIME_FORMATS[name]).to_pylist()
        else:
            values = _safe(pc.cast(dictionary.dictionary, pa.string()))
        indices = pc.cast(pc.fill_null(dictionary.indices, len(values)), pa.int64())
        values.append(NULL_VALUE)  # the index of a null row
        radix = len(values)
        codes = indices if codes is None else pc.add(pc.multiply(codes, radix), indices)
        literal.append(None)
        dictionaries.append([str(v) for v in values])
    if codes is None:
        return [("".join(t for t in literal if t is not None), table)]
    out: list[tuple[str, pa.Table]] = []
    unique = pc.unique(codes).to_pylist()
    for code in unique:
        digits, rest = [], int(code)
        for values in reversed(dictionaries):
            rest, digit = divmod(rest, len(values))
            digits.append(values[digit])
        digits.reverse()
        parts, at = [], 0
        for piece in literal:
            if piece is None:
                parts.append(digits[at])
                at += 1
            else:
                parts.append(piece)
        rows = table if len(unique) == 1 else table.filter(pc.equal(codes, code))
        out.append(("".join(parts), rows))
    return out


def _time_unit(template: Template) -> str:
    """The coarsest unit to which `__time__` can be floored without changing any of the
    template's time placeholders."""
    names = {name for _, name in template.pieces}
    if "minute" in names:
        return "minute"
    return "hour" if "hour" in names else "day"


def _encode_time(column: pa.ChunkedArray, unit: str) -> pa.DictionaryArray:
    """`__time__` floored to `unit`, dictionary-encoded. The rows of one write usually fall in
    one hour (or day): then the dictionary has one value and no row is looked at twice."""
    low, high = pc.min_max(column).values()
    if low.is_valid and high.is_valid:
        first = pc.floor_temporal(low, unit=unit)
        if first == pc.floor_temporal(high, unit=unit):
            indices = pa.repeat(pa.scalar(0, pa.int32()), len(column))
            return pa.DictionaryArray.from_arrays(indices, pa.array([first.as_py()], low.type))
    return pc.dictionary_encode(pc.floor_temporal(column.combine_chunks(), unit=unit))


def _safe(strings: pa.Array) -> list[str]:
    """The distinct values of a column, each made a safe path segment (`_cap`ped)."""
    values = pc.fill_null(strings, NULL_VALUE)
    values = pc.replace_substring_regex(values, pattern=_UNSAFE, replacement="_")
    values = pc.replace_substring_regex(values, pattern=r"^\.", replacement="_")
    values = pc.if_else(pc.equal(values, ""), NULL_VALUE, values)
    return [
        _cap(str(safe), original)
        for safe, original in zip(values.to_pylist(), strings.to_pylist(), strict=True)
    ]


def _safe_text(value: str) -> str:
    out = pc.replace_substring_regex(pa.array([value]), pattern=_UNSAFE, replacement="_")
    text = str(out[0].as_py())
    return _cap("_" + text[1:] if text.startswith(".") else text or NULL_VALUE, value)


def _cap(safe: str, original: str | None) -> str:
    """`safe` if it is short enough, else its first KEEP_BYTES characters and a hash of the
    whole original value (distinct long values stay distinct). `safe` is ASCII."""
    if len(safe.encode()) <= MAX_VALUE_BYTES:
        return safe
    digest = hashlib.sha256((original or "").encode()).hexdigest()[:16]
    return f"{safe[:KEEP_BYTES]}-{digest}"
