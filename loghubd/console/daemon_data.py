"""The daemon console's memory: the daemon's snapshots sampled every few seconds and kept for
the last minutes, turned into throughput and lag series and a log of errors.

Pure: no I/O, no clock. `History.record(snapshot)` takes one `DaemonSnapshot` (the frozen
picture every ops view is built from, `loghubd.consumer.snapshot`); the page asks for series
and errors. Throughput is the difference of a shard's `logs` counter between two samples
(the counter restarts when the shard is taken again: that difference counts as nothing).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from loghubd.consumer.snapshot import DaemonSnapshot

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
        self._last_text: dict[tuple[ShardKey, str], str] = {}
        self.samples = 0

    def record(self, snap: DaemonSnapshot) -> None:
        self.samples += 1
        now = snap.taken_at
        for src in snap.sources:
            self._note((src.name, -1), "source", now, src.error)
            self._note((src.name, -1), "heartbeat", now, src.heartbeat.last_error)
            for shard in src.shards:
                key = (src.name, shard.shard)
                series = self._series.get(key)
                if series is None:
                    series = self._series[key] = _Series(
                        deque(maxlen=self.keep), deque(maxlen=self.keep), deque(maxlen=self.keep)
                    )
                series.times.append(now)
                series.consumed.append(float(shard.logs))
                series.lag_seconds.append(float(shard.lag_seconds or 0.0))
                self._note(key, "reason", now, shard.reason)
                self._note(key, "processor", now, shard.processor_error)
                if shard.last_error is not None:
                    self._note(key, "last", shard.last_error.at, shard.last_error.message)

    def _note(self, key: ShardKey, kind: str, when: float, text: str) -> None:
        """An error is remembered when it appears or changes (not at every sample)."""
        if text and text != self._last_text.get((key, kind)):
            log = self._errors.setdefault(key, deque(maxlen=ERRORS_KEPT))
            if not any(e.text == text and e.when == when for e in log):
                log.append(ShardError(when, key[0], key[1], text))
        self._last_text[(key, kind)] = text

    def throughput(self, key: ShardKey) -> list[float]:
        """Logs/s between consecutive samples (a counter restart counts as nothing)."""
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
