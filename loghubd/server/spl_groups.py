"""SPL on PullLogs over stored LogGroups: decode each group, run the compiled program on each
log's flattened form, encode what survives.

Pure (no I/O): the API runs it in a worker thread so the event loop keeps answering.

- A program made only of `where` keeps surviving logs byte for byte: a group whose logs all
  survive is served as stored; otherwise the group is re-encoded without the dropped logs
  (Topic, Source, LogTags, MachineUUID, each log's Time/Time_ns/Contents untouched).
- A program that reshapes logs (`extend`, `project*`) rebuilds each log from its output
  record: `__time__` → Time, `__time_ns_part__` → Time_ns, `__topic__`/`__source__`/
  `__tag__:<key>` → the group's Topic/Source/LogTags, every other field → a Content (in the
  record's order). Consecutive logs of a group that share Topic, Source and tags stay in one
  group (so one group in → one group out, unless the program gave logs different ones).
- Groups left empty are dropped; the caller still advances the cursor over them.
- A log whose evaluation fails (SplEvalError) is dropped and counted in `failed_lines`.

Values that are not UTF-8 (the Raw schema) are handled as the SDK does: decoded with
`surrogateescape`, so filtering and re-encoding keep every byte. (A reshaped log whose keys,
topic, source or tags are not UTF-8 cannot be re-encoded: it counts as failed.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from loghubd.protocol import pb
from loghubd.server import spl

_TIME, _TIME_NS = spl.TIME_FIELDS
_TAG = "__tag__:"


@dataclass(frozen=True, slots=True)
class Filtered:
    groups: list[bytes]  # serialized LogGroups to return
    raw_lines: int  # logs scanned
    result_lines: int  # logs returned
    failed_lines: int  # logs whose evaluation failed (dropped)


def framed_size(groups: Sequence[bytes]) -> int:
    """Length of the LogGroupList that frames `groups` (see pb.frame_log_groups)."""
    return sum(1 + len(pb.encode_varint(len(g))) + len(g) for g in groups)


def _text(value: str | bytes) -> str:
    """A string field as text; invalid UTF-8 (which upb returns as bytes) kept losslessly."""
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value


def _decode(data: bytes) -> tuple[Any, bool] | None:
    """(group, is_raw): the Raw schema (bytes values) when some value is not UTF-8; None if
    the bytes are not a LogGroup at all (never stored so)."""
    try:
        group = pb.LogGroup.FromString(data)
        if any(isinstance(c.Value, bytes) for log in group.Logs for c in log.Contents):
            return pb.LogGroupRaw.FromString(data), True
    except (UnicodeDecodeError, pb.DecodeError):
        return None
    return group, False


def _base(group: Any) -> spl.Record:
    base = {"__topic__": _text(group.Topic), "__source__": _text(group.Source)}
    for tag in group.LogTags:
        base[_TAG + _text(tag.Key)] = _text(tag.Value)
    return base


def _record(log: Any, base: spl.Record) -> spl.Record:
    """The SDK's flattened form of one log, every value a string."""
    record = {_TIME: str(log.Time)}
    if log.Time_ns:
        record[_TIME_NS] = str(log.Time_ns)
    record.update(base)
    for c in log.Contents:
        record[_text(c.Key)] = _text(c.Value)
    return record


def _meta_key(record: spl.Record) -> tuple[str, str, tuple[tuple[str, str], ...]]:
    tags = tuple((k[len(_TAG) :], v) for k, v in record.items() if k.startswith(_TAG))
    return record.get("__topic__", ""), record.get("__source__", ""), tags


def _is_meta(key: str) -> bool:
    return key in (_TIME, _TIME_NS, "__topic__", "__source__") or key.startswith(_TAG)


def _encoded(record: spl.Record, is_raw: bool) -> tuple[int, int | None, list[tuple[str, Any]]]:
    """(Time, Time_ns, contents) of an output record; raises ValueError/UnicodeError if it
    cannot be encoded (then the log counts as failed)."""
    time = int(record[_TIME])
    ns = int(record[_TIME_NS]) if _TIME_NS in record else None
    if not 0 <= time < 2**32 or (ns is not None and not 0 <= ns < 1_000_000_000):
        raise ValueError("time out of range")
    contents: list[tuple[str, Any]] = []
    for k, v in record.items():
        if _is_meta(k):
            continue
        k.encode("utf-8")  # a key must be valid UTF-8 in both schemas
        if is_raw:
            contents.append((k, v.encode("utf-8", "surrogateescape")))
        else:
            v.encode("utf-8")
            contents.append((k, v))
    return time, ns, contents


def _rebuild(source: Any, records: list[spl.Record], is_raw: bool) -> tuple[list[bytes], int]:
    """Encode output records as groups (one per run of equal Topic/Source/tags); returns the
    groups and how many records could not be encoded."""
    failed = 0
    runs: list[tuple[tuple[str, str, tuple[tuple[str, str], ...]], Any]] = []
    for record in records:
        try:
            time, ns, contents = _encoded(record, is_raw)
            key = _meta_key(record)
            for part in (key[0], key[1], *(x for kv in key[2] for x in kv)):
                part.encode("utf-8")
        except (ValueError, KeyError, UnicodeError):
            failed += 1
            continue
        if not runs or runs[-1][0] != key:
            group = (pb.LogGroupRaw if is_raw else pb.LogGroup)()
            for name in ("Reserved", "MachineUUID"):
                value = getattr(source, name)
                if source.HasField(name) and isinstance(value, str):  # bytes: not UTF-8
                    setattr(group, name, value)
            topic, src, tags = key
            if topic:
                group.Topic = topic
            if src:
                group.Source = src
            for k, v in tags:
                group.LogTags.add(Key=k, Value=v)
            runs.append((key, group))
        log = runs[-1][1].Logs.add(Time=time)
        if ns is not None:
            log.Time_ns = ns
        for k, v in contents:
            log.Contents.add(Key=k, Value=v)
    return [g.SerializeToString() for _key, g in runs], failed


def apply(program: spl.Program, groups: Sequence[bytes]) -> Filtered:
    """Run `program` over the logs of `groups` (serialized LogGroups, in cursor order)."""
    out: list[bytes] = []
    raw_lines = result_lines = failed_lines = 0
    for data in groups:
        decoded = _decode(data)
        if decoded is None:
            continue
        group, is_raw = decoded
        n = len(group.Logs)
        raw_lines += n
        if not program.stages:  # `*`: everything, as stored
            out.append(data)
            result_lines += n
            continue
        base = _base(group)
        kept: list[int] = []
        results: list[spl.Record] = []
        for i, log in enumerate(group.Logs):
            try:
                result = program.run(_record(log, base))
            except spl.SplEvalError:
                failed_lines += 1
                continue
            if result is not None:
                kept.append(i)
                results.append(result)
        if not kept:
            continue
        if program.filter_only:
            if len(kept) < n:
                keep = set(kept)
                for i in range(n - 1, -1, -1):
                    if i not in keep:
                        del group.Logs[i]
                data = group.SerializeToString()
            out.append(data)
            result_lines += len(kept)
            continue
        rebuilt, failed = _rebuild(group, results, is_raw)
        out.extend(rebuilt)
        failed_lines += failed
        result_lines += len(results) - failed
    return Filtered(out, raw_lines, result_lines, failed_lines)
