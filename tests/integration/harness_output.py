"""Reading what daemons delivered: output files, ids and records, `LineCounter`, and
`assert_delivered_exactly` (no loss, no duplicate, with a report of what differs).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.integration.daemon_harness import Daemon


def output_files(dirs: Iterable[Path]) -> list[Path]:
    return sorted(p for d in dirs for p in Path(d).glob("shard-*.jsonl"))


def shard_of(path: Path) -> int:
    """`shard-<n>.jsonl`, and the replay's `shard-<n>.replay-<start>-<end>.jsonl`."""
    return int(path.name.removeprefix("shard-").split(".", 1)[0])


def read_records(
    dirs: Iterable[Path], torn_tail_ok: bool = False
) -> list[tuple[int, dict[str, Any]]]:
    """(shard, record) for every line of every `shard-*.jsonl` under `dirs`.

    A file that ends in part of a line is what a daemon killed (kill -9) in the middle of a
    write leaves. The next processor that opens the file for that shard cuts it off
    (docs/jsonl.md), but a directory no daemon writes to again keeps it. That batch was never
    checkpointed, so its logs are delivered again by whoever holds the shard next. With
    `torn_tail_ok` such a last line is left out, as not delivered; without it, it fails with
    the file named. A part-line anywhere else always fails."""
    out: list[tuple[int, dict[str, Any]]] = []
    for path in output_files(dirs):
        shard = shard_of(path)
        with open(path, "rb") as f:
            for line in f:
                if not line.endswith(b"\n"):  # the last line, and not a whole one
                    assert torn_tail_ok, f"{path} ends in part of a line: {line[:200]!r}"
                    break
                if line.strip():
                    out.append((shard, json.loads(line)))
    return out


def read_ids(dirs: Iterable[Path]) -> list[str]:
    """The `id` of every delivered log (duplicates kept), over `shard-*.jsonl` files."""
    return [str(r["id"]) for _shard, r in read_records(dirs)]


def count_lines(dirs: Iterable[Path]) -> int:
    total = 0
    for path in output_files(dirs):
        with open(path, "rb") as f:
            total += f.read().count(b"\n")
    return total


class LineCounter:
    """Counts the lines of the growing `shard-*.jsonl` files of some directories, reading
    only what was appended since the last call."""

    def __init__(self, dirs: Iterable[Path]) -> None:
        self.dirs = list(dirs)
        self._offsets: dict[Path, int] = {}
        self.per_file: dict[Path, int] = {}

    def count(self) -> int:
        for path in output_files(self.dirs):
            offset = self._offsets.get(path, 0)
            with open(path, "rb") as f:
                f.seek(offset)
                data = f.read()
            # Count complete lines only; a half-written tail is read again next time.
            end = data.rfind(b"\n") + 1
            self._offsets[path] = offset + end
            self.per_file[path] = self.per_file.get(path, 0) + data.count(b"\n", 0, end)
        return sum(self.per_file.values())

    def per_shard(self) -> dict[int, int]:
        self.count()
        out: dict[int, int] = {}
        for path, n in self.per_file.items():
            out[shard_of(path)] = out.get(shard_of(path), 0) + n
        return out


def expected_ids(prefix: str, count: int, start: int = 0) -> list[str]:
    return [f"{prefix}{n}" for n in range(start, start + count)]


def delivery_report(written: Iterable[str], delivered: Iterable[str]) -> dict[str, Any]:
    """missing (written, never delivered), duplicated (delivered more than once) and
    unexpected (delivered, never written) ids."""
    written_set = set(written)
    counts = Counter(delivered)
    return {
        "missing": sorted(written_set - counts.keys()),
        "duplicated": {i: n for i, n in counts.items() if n > 1},
        "unexpected": sorted(counts.keys() - written_set),
    }


def short(items: Any, n: int = 10) -> str:
    """A short rendering of a long list/dict for assertion messages."""
    seq = list(items.items()) if isinstance(items, Mapping) else list(items)
    return f"{len(seq)} item(s): {seq[:n]}{' ...' if len(seq) > n else ''}"


def assert_delivered_exactly(daemons: Iterable[Daemon], written: Iterable[str]) -> None:
    """The daemons' outputs together hold every id of `written` exactly once, and no other."""
    ds = list(daemons)
    report = delivery_report(written, read_ids([d.output for d in ds]))
    assert report == {"missing": [], "duplicated": {}, "unexpected": []}, (
        [d.name for d in ds],
        {k: short(v) for k, v in report.items()},
    )
