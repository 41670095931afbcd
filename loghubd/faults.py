"""Fault episodes: a run of failures of one thing (a shard's pulls, the heartbeat, a batch in
the processor, a sink's requests), so that the first success after it says so once. Each
failure is logged as it happens (`pull_failed`, `http_retry`, ...); without a closing line an
operator tailing the journal cannot tell whether the fault is still going on (on-call audit).
Pure: the caller passes the clock's readings."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Episode:
    failures: int = 0
    since: float = 0.0  # the clock's reading at the episode's first failure

    def failed(self, now: float) -> None:
        if self.failures == 0:
            self.since = now
        self.failures += 1

    @property
    def failing_since(self) -> float | None:
        """The clock's reading at the first failure of the episode going on (None: none is)."""
        return self.since if self.failures else None

    def recovered(self, now: float) -> dict[str, float | int] | None:
        """The fields of the `*_recovered` line at a success that ends an episode (how many
        failures, for how long), or None when nothing had failed. Starts a new episode."""
        if self.failures == 0:
            return None
        said: dict[str, float | int] = {
            "failures": self.failures,
            "failing_for_s": round(max(0.0, now - self.since), 3),
        }
        self.failures = 0
        return said
