"""The daemon console's memory: samples of the daemon's status taken every few seconds, kept
for the last minutes, turned into throughput and lag series and a log of shard errors.

Pure: no I/O, no clock. `History.record(now, status, consumed)` takes one sample: the
daemon's status snapshot (what `/status` serves) and the logs each shard has finished so far
(`loghubd_consumed_logs_total`); the page asks for series and errors.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

KEEP = 90  # samples kept: 3 minutes at one every 2 s
POINTS = 30  # points a series is drawn with (every third sample: 6 s apart)
ERRORS_KEPT = 5  # per shard

ShardKey = tuple[str, int]  # (source name, shard id)


@dataclass(frozen=True, slots=True)
class ShardError:
    when: float
    source: str
    shard: int  # -1: the source itself
    text: str


@dataclass(slots=True)
class _Series:
    times: deque[float]
    consumed: deque[float]
    lag_seconds: deque[float]


class History:
    def __init__(self, keep: int = KEEP) -> None:
        self.keep = keep
        self._series: dict[ShardKey, _Series] = {}
        self._errors: dict[ShardKey, deque[ShardError]] = {}
        self._last_text: dict[ShardKey, str] = {}
        self.samples = 0

    def record(
        self, now: float, status: Mapping[str, Any], consumed: Mapping[ShardKey, float]
    ) -> None:
        self.samples += 1
        for src in status.get("sources", ()):
            name = str(src.get("name", ""))
            self._note_error((name, -1), now, str(src.get("error") or ""))
            for row in src.get("shards", ()):
                key = (name, int(row["shard"]))
                series = self._series.get(key)
                if series is None:
                    series = self._series[key] = _Series(
                        deque(maxlen=self.keep), deque(maxlen=self.keep), deque(maxlen=self.keep)
                    )
                series.times.append(now)
                series.consumed.append(float(consumed.get(key, 0.0)))
                series.lag_seconds.append(float(row.get("lag_seconds") or 0.0))
                self._note_error(key, now, str(row.get("reason") or ""))

    def _note_error(self, key: ShardKey, now: float, text: str) -> None:
        """An error is remembered when it appears or changes (not at every sample)."""
        if text and text != self._last_text.get(key):
            log = self._errors.setdefault(key, deque(maxlen=ERRORS_KEPT))
            log.append(ShardError(now, key[0], key[1], text))
        self._last_text[key] = text

    def throughput(self, key: ShardKey) -> list[float]:
        """Logs/s between consecutive samples (a counter reset counts as nothing)."""
        s = self._series.get(key)
        if s is None or len(s.times) < 2:
            return []
        t, c = _thin(s.times), _thin(s.consumed)
        return [max(0.0, c[i] - c[i - 1]) / max(t[i] - t[i - 1], 1e-6) for i in range(1, len(t))]

    def lag(self, key: ShardKey) -> list[float]:
        s = self._series.get(key)
        return [] if s is None else _thin(s.lag_seconds)

    def span(self, key: ShardKey) -> float:
        s = self._series.get(key)
        return 0.0 if s is None or len(s.times) < 2 else s.times[-1] - s.times[0]

    def errors(self) -> list[ShardError]:
        """Every remembered error, newest first."""
        out = [e for log in self._errors.values() for e in log]
        return sorted(out, key=lambda e: e.when, reverse=True)


def _thin(values: deque[float]) -> list[float]:
    """At most POINTS values, evenly spaced, always ending with the newest."""
    items = list(values)
    stride = -(-len(items) // POINTS)  # ceiling division
    return items[::-1][::stride][::-1] if stride > 1 else items


def consumed_by_shard(families: Sequence[Any]) -> dict[ShardKey, float]:
    """`loghubd_consumed_logs_total` per (source, shard) from collected metric families
    (each sample labelled `source` and `shard`, as the ops registry serves them)."""
    out: dict[ShardKey, float] = {}
    for family in families:
        if family.name != "loghubd_consumed_logs":
            continue
        for sample in family.samples:
            if not sample.name.endswith("_total"):
                continue
            labels = sample.labels
            try:
                key = (str(labels.get("source", "")), int(labels["shard"]))
            except (KeyError, ValueError):
                continue
            out[key] = out.get(key, 0.0) + float(sample.value)
    return out
