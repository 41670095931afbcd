"""Logs → the bytes of a `COPY ... FROM STDIN` (text format), one row per log.

Pure: no I/O. Each mapped field is converted here, in Python, before anything is sent: a
value that does not convert to its column's type raises `BadRow` naming the row (its index in
the batch and the log itself) and the reason, so the batch goes to the daemon's failure
policy with what to fix, instead of the server refusing a whole COPY at some line.
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from loghubd import BatchRejected
from loghubd_postgres.options import Options

_INT_RANGES = {
    "smallint": (-(2**15), 2**15 - 1),
    "integer": (-(2**31), 2**31 - 1),
    "bigint": (-(2**63), 2**63 - 1),
}
_TRUE = {"t", "true", "1", "yes", "y", "on"}
_FALSE = {"f", "false", "0", "no", "n", "off"}
NULL = "\\N"
# One encoder, made once: json.dumps re-reads its keyword arguments on every call.
_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _escape(text: str) -> str:
    """COPY text format: backslash, newline, carriage return and tab are escaped (NUL cannot
    be stored in text at all). Most values have none of them: four `in` tests are far cheaper
    than a `translate`."""
    if "\\" in text or "\n" in text or "\t" in text or "\r" in text:
        text = text.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t")
        text = text.replace("\r", "\\r")
    return text


class BadRow(BatchRejected, ValueError):
    """A log that cannot become a row of the table (its index, the log, the reason). Trying
    again cannot help: the daemon's failure policy applies at once."""


def _text(value: Any) -> str:
    text = value if isinstance(value, str) else str(value)
    if "\x00" in text:
        raise ValueError("text cannot hold a NUL character")
    return text  # not UTF-8 on the wire (surrogates): found when the batch is encoded


def _integer(kind: str) -> Callable[[Any], str]:
    low, high = _INT_RANGES[kind]

    def convert(value: Any) -> str:
        try:
            number = int(value.strip()) if isinstance(value, str) else int(value)
        except (ValueError, TypeError):
            raise ValueError("not an integer") from None
        if not low <= number <= high:
            raise ValueError(f"{number} is out of range for {kind}")
        return str(number)

    return convert


def _float(value: Any) -> str:
    try:
        return repr(float(value))
    except (ValueError, TypeError):
        raise ValueError("not a number") from None


def _numeric(value: Any) -> str:
    try:
        number = Decimal(str(value).strip())
    except InvalidOperation:
        raise ValueError(f"{value!r} is not a number") from None
    return str(number)


def _boolean(value: Any) -> str:
    text = str(value).strip().lower()
    if text in _TRUE:
        return "t"
    if text in _FALSE:
        return "f"
    raise ValueError(f"{value!r} is not a boolean")


@functools.lru_cache(maxsize=4096)
def _seconds(value: int | float) -> str:
    return datetime.fromtimestamp(value, UTC).isoformat()  # logs of a batch share seconds


def _timestamp(value: Any) -> str:
    """Unix seconds (an integer or a decimal string, like `__time__`) or ISO 8601."""
    if isinstance(value, int | float):
        return _seconds(value)
    text = str(value).strip()
    try:
        return datetime.fromtimestamp(float(text), UTC).isoformat()
    except ValueError:
        pass
    try:
        stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError("neither unix seconds nor an ISO 8601 time") from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return stamp.isoformat()


def _date(value: Any) -> str:
    try:
        return date.fromisoformat(str(value).strip()).isoformat()
    except ValueError:
        raise ValueError("not an ISO 8601 date (YYYY-MM-DD)") from None


def _jsonb(value: Any) -> str:
    if isinstance(value, str):
        try:
            parsed = json.loads(value)  # a field mapped to jsonb must hold JSON text
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"not JSON text ({exc.msg} at character {exc.pos}); a field "
                "mapped to a jsonb column must hold JSON, or map it to text"
            ) from None
        # (The substring test first: it is one scan, and almost never true.)
        if "\\u0000" in value and (where := _nul_in(parsed)) is not None:
            raise ValueError(f"its JSON holds a NUL character (\\u0000{where}){_NO_NUL}")
        return _text(value)
    text = _dumps(value)
    if "\\u0000" in text and (where := _nul_in(value)) is not None:
        raise ValueError(f"a NUL character{where}{_NO_NUL}")
    return _text(text)


_NO_NUL = ", which PostgreSQL's jsonb cannot store (it refuses \\u0000)"


def _nul_in(value: Any) -> str | None:
    """Where a NUL character is in a JSON value (" in field 'k'", or "" at the top), or
    None: json.dumps writes it as \\u0000, which jsonb refuses, and the server's refusal of
    the COPY names no row (postgres audit)."""
    if isinstance(value, str):
        return "" if "\x00" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            if "\x00" in str(key) or _nul_in(item) is not None:
                return f" in field {str(key)[:100]!r}"
    elif isinstance(value, list):
        for item in value:
            if (where := _nul_in(item)) is not None:
                return where
    return None


CONVERTERS: dict[str, Callable[[Any], str]] = {
    "text": _text,
    "smallint": _integer("smallint"),
    "integer": _integer("integer"),
    "bigint": _integer("bigint"),
    "real": _float,
    "double precision": _float,
    "numeric": _numeric,
    "boolean": _boolean,
    "timestamptz": _timestamp,
    "date": _date,
    "jsonb": _jsonb,
}


class RowEncoder:
    """Turns logs into COPY text for the column list `options.all_columns`."""

    def __init__(self, options: Options) -> None:
        self.columns = [(c.name, c.field, CONVERTERS[c.type]) for c in options.columns]
        self.mapped = {c.field for c in options.columns}
        self.rest = options.rest_column is not None
        self.document = options.document_column is not None

    def encode(self, logs: Iterable[dict[str, Any]]) -> tuple[bytes, int]:
        """(COPY text, number of rows); BadRow at the first log that does not convert."""
        return self._encode(logs, 0)

    def chunks(self, logs: Iterable[dict[str, Any]], rows: int) -> Iterator[tuple[bytes, int]]:
        """`encode` in pieces of `rows` rows, so that a writer can send one piece while the
        next is converted (row numbers in errors count from the first log)."""
        it = iter(logs)
        done = 0
        while piece := list(itertools.islice(it, rows)):
            yield self._encode(piece, done)
            done += len(piece)

    def _encode(self, logs: Iterable[dict[str, Any]], first: int) -> tuple[bytes, int]:
        lines: list[str] = []
        for index, log in enumerate(logs, first):
            fields: list[str] = []
            for name, field, convert in self.columns:
                value = log.get(field)
                if value is None:
                    fields.append(NULL)
                    continue
                try:
                    fields.append(_escape(convert(value)))
                except (ValueError, TypeError, OverflowError) as exc:
                    raise BadRow(
                        f"row {index}: field {field!r} = {str(value)[:200]!r} does not convert "
                        f"to column {name!r}: {exc}; the log: {_short(log)}"
                    ) from exc
            try:
                if self.rest:
                    rest = {k: v for k, v in log.items() if k not in self.mapped}
                    fields.append(_escape(_jsonb(rest)))
                if self.document:
                    fields.append(_escape(_jsonb(log)))
            except (ValueError, TypeError) as exc:
                raise BadRow(
                    f"row {index}: not storable as jsonb: {exc}; the log: {_short(log)}"
                ) from exc
            lines.append("\t".join(fields))
        if not lines:
            return b"", 0
        try:
            return ("\n".join(lines) + "\n").encode("utf-8"), len(lines)
        except UnicodeEncodeError:
            for index, line in enumerate(lines, first):  # rare: find the row to name it
                try:
                    line.encode("utf-8")
                except UnicodeEncodeError as exc:
                    raise BadRow(f"row {index}: a value is not UTF-8 ({exc})") from exc
            raise


def _short(log: dict[str, Any]) -> str:
    text = json.dumps(log, ensure_ascii=False, default=str)
    return text if len(text) <= 500 else text[:500] + "..."
