"""The daemon's Prometheus instruments, on a registry of their own (no global registry).

Names: prefix `loghubd_`, units in the name, `_total` for counters; per-shard series carry a
`shard` label. Each source (consumed logstore) has its own `Metrics`; `/metrics` serves them
all through `labelled_by_source`, which adds a `source` label to every series, so the code
that counts never needs to know which source it counts for.

Conventions of what is exposed (docs/metrics.md is the reference):
- no `*_created` series (they double the series count and no query of ours uses them);
- `process_*`, `python_info` and `loghubd_build_info{version=...}` beside our own families;
- the error counters of a shard exist at 0 from the moment the shard is taken
  (`start_shard`), so `increase()` sees the first incident rather than a series appearing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

import loghubd

_LATENCY = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry(auto_describe=True)
        shard = ["shard"]
        self.consumed_logs = Counter(
            "loghubd_consumed_logs_total",
            "Logs handed to the processor and finished",
            shard,
            registry=r,
        )
        self.consumed_bytes = Counter(
            "loghubd_consumed_bytes_total", "Raw (uncompressed) bytes finished", shard, registry=r
        )
        self.consumed_batches = Counter(
            "loghubd_consumed_batches_total", "Batches finished", shard, registry=r
        )
        self.filtered_logs = Counter(
            "loghubd_filtered_logs_total",
            "Logs the server's SPL query (consumer.query) filtered out before sending",
            shard,
            registry=r,
        )
        self.fetch_seconds = Histogram(
            "loghubd_fetch_duration_seconds",
            "PullLogs latency",
            shard,
            buckets=_LATENCY,
            registry=r,
        )
        self.process_seconds = Histogram(
            "loghubd_process_duration_seconds",
            "Processor time per batch",
            shard,
            buckets=_LATENCY,
            registry=r,
        )
        self.lag_log_groups = Gauge(
            "loghubd_lag_log_groups",
            "Log groups between the fetch position and the end (NaN while pulls fail: unknown)",
            shard,
            registry=r,
        )
        self.lag_logs = Gauge(
            "loghubd_lag_logs",
            "Logs between the fetch position and the end (estimated: log groups times the "
            "logs per log group lately; NaN while pulls fail: unknown)",
            shard,
            registry=r,
        )
        self.lag_seconds = Gauge(
            "loghubd_lag_seconds",
            "Receive-time age of the oldest unfetched data (0 when caught up, NaN while "
            "pulls fail: unknown)",
            shard,
            registry=r,
        )
        self.checkpoint_age = Gauge(
            "loghubd_checkpoint_age_seconds",
            "Seconds the shard's committed checkpoint has been holding back fetched data "
            "(0 when everything fetched is committed; grows while a batch or commit is stuck)",
            shard,
            registry=r,
        )
        self.last_batch_time = Gauge(
            "loghubd_last_batch_timestamp_seconds",
            "Unix time the shard last finished a batch (alert on time() minus this while lag > 0)",
            shard,
            registry=r,
        )
        self.held_shards = Gauge("loghubd_held_shards", "Shards this consumer holds", registry=r)
        self.heartbeat_seconds = Histogram(
            "loghubd_heartbeat_duration_seconds",
            "Latency of answered heartbeats (its _count is the number answered)",
            buckets=_LATENCY,
            registry=r,
        )
        self.heartbeat_failures = Counter(
            "loghubd_heartbeat_failures_total", "Heartbeats that failed", registry=r
        )
        self.heartbeat_delay = Gauge(
            "loghubd_heartbeat_delay_seconds",
            "How late the last heartbeat started against its schedule",
            registry=r,
        )
        self.heartbeat_delay_max = Gauge(
            "loghubd_heartbeat_delay_max_seconds",
            "The latest any heartbeat started against its schedule, since the daemon started",
            registry=r,
        )
        self.rebalances = Counter(
            "loghubd_rebalance_shards_total",
            "Shards gained or lost through rebalancing",
            ["direction"],
            registry=r,
        )
        self.processor_errors = Counter(
            "loghubd_processor_errors_total", "Processor failures", shard, registry=r
        )
        self.processor_retries = Counter(
            "loghubd_processor_retries_total", "Batch retries scheduled", shard, registry=r
        )
        self.dead_lettered = Counter(
            "loghubd_dead_lettered_batches_total",
            "Batches written to the dead-letter directory",
            shard,
            registry=r,
        )
        self.commits = Counter(
            "loghubd_checkpoint_commits_total",
            "Checkpoint commits by result",
            ["result"],
            registry=r,
        )
        self.ownership_lost = Counter(
            "loghubd_ownership_lost_total",
            "Shards dropped because the server said another consumer owns them",
            shard,
            registry=r,
        )
        self.checkpoints_moved = Counter(
            "loghubd_checkpoints_moved_by_others_total",
            "Held shards whose checkpoint moved without this daemon, by who moved it: "
            "same_name (another process under this consumer name), reset (a forced group "
            "reset), other_consumer (the shard's new owner)",
            ["by"],
            registry=r,
        )
        self.bytes_in_flight = Gauge(
            "loghubd_bytes_in_flight", "Fetched bytes not yet finished", registry=r
        )
        self.shards_outside_filter = Gauge(
            "loghubd_shards_outside_filter",
            "Shards the service assigns this consumer outside consumer.shards (not consumed)",
            registry=r,
        )
        self.ready = Gauge(
            "loghubd_ready",
            "1 when this source is ready (what /readyz judges), else 0",
            registry=r,
        )
        for direction in ("gained", "lost"):
            self.rebalances.labels(direction)
        for result in ("ok", "failed", "ownership_lost"):
            self.commits.labels(result)
        for by in ("same_name", "reset", "other_consumer"):
            self.checkpoints_moved.labels(by)

    def window_tally(self) -> dict[str, int]:
        """Logs delivered to the processor and filtered out by the query, over the shards
        held now (a bounded run's summary: they are held until it ends)."""
        return {
            "logs": _total(self.consumed_logs),
            "filtered_logs": _total(self.filtered_logs),
        }

    def start_shard(self, shard: int, checkpoint_age: Callable[[], float]) -> None:
        """A shard was taken: its counters exist from now on (at 0 until something happens,
        so `increase()` catches the first error), and its checkpoint age is read from
        `checkpoint_age` at every scrape."""
        label = str(shard)
        counters = (
            self.consumed_logs,
            self.consumed_bytes,
            self.consumed_batches,
            self.filtered_logs,
            self.processor_errors,
            self.processor_retries,
            self.dead_lettered,
            self.ownership_lost,
        )
        for counter in counters:
            counter.labels(label)
        self.checkpoint_age.labels(label).set_function(checkpoint_age)

    def forget_shard(self, shard: int) -> None:
        """Drop a shard's gauges when it is let go (counters stay: they are totals)."""
        gauges = (
            self.lag_log_groups,
            self.lag_logs,
            self.lag_seconds,
            self.checkpoint_age,
            self.last_batch_time,
        )
        for gauge in gauges:
            with contextlib.suppress(KeyError):
                gauge.remove(str(shard))


# Types whose samples include a `<name>_created` series in prometheus_client.
_WITH_CREATED = frozenset({"counter", "histogram", "summary", "gaugehistogram"})


Families = list[tuple[str | None, list[Metric]]]  # what the sources' registries held


class _BySource:
    """A collector serving several registries as one: every sample gets a `source` label
    (unless the name is None), families of the same name are merged (one HELP/TYPE header
    each), and `*_created` samples are left out. `read` looks at the registries; `merge`
    relabels what it read and touches nothing else, so it may run in another thread."""

    def __init__(self, sources: Sequence[tuple[str | None, CollectorRegistry]]) -> None:
        self._sources = list(sources)

    def read(self) -> Families:
        return [(source, list(registry.collect())) for source, registry in self._sources]

    @staticmethod
    def merge(read: Families) -> list[Metric]:
        merged: dict[str, Metric] = {}
        for source, families in read:
            extra = {} if source is None else {"source": source}
            for family in families:
                out = merged.get(family.name)
                if out is None:
                    out = Metric(family.name, family.documentation, family.type, family.unit)
                    merged[family.name] = out
                created = family.name + "_created" if family.type in _WITH_CREATED else None
                out.samples.extend(
                    sample._replace(labels={**extra, **sample.labels})
                    for sample in family.samples
                    if sample.name != created
                )
        return list(merged.values())

    def collect(self) -> Iterable[Metric]:
        return self.merge(self.read())


class _BuildInfo:
    def collect(self) -> Iterable[Metric]:
        info = GaugeMetricFamily(
            "loghubd_build_info", "loghubd's version (always 1)", labels=["version"]
        )
        info.add_metric([loghubd.__version__], 1.0)
        return [info]


def exposed(sources: Sequence[tuple[str | None, CollectorRegistry]]) -> CollectorRegistry:
    """The registry an HTTP `/metrics` serves: the (name, registry) pairs merged, each series
    labelled `source=<name>` (none when the name is None), no `*_created` series, plus the
    process's own metrics and `loghubd_build_info`."""
    registry = Exposed()
    registry.register(_BySource(sources))
    registry.register(_BuildInfo())
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    return registry


class ConfigReloads:
    """Whether the daemon runs what its configuration file says (as Prometheus's own
    `prometheus_config_last_reload_*`): `loghubd_config_last_reload_successful` is 0 after a
    SIGHUP whose file was refused (the daemon runs on with an older one) and 1 otherwise;
    `..._success_timestamp_seconds` is when the running configuration was loaded (an accepted
    reload starts a fresh process, so: its start)."""

    def __init__(self, loaded_at: float) -> None:
        self.loaded_at = loaded_at
        self.last: tuple[float, str | None] | None = None  # the last check: when, problem

    @property
    def successful(self) -> bool:
        return self.last is None or self.last[1] is None

    def checked(self, problem: str | None, now: float) -> None:
        """A reload's check ended: `problem` is why the file was refused (None: accepted,
        and the exec follows)."""
        self.last = (now, problem)

    def collect(self) -> Iterable[Metric]:
        ok = GaugeMetricFamily(
            "loghubd_config_last_reload_successful",
            "0 when the last SIGHUP's configuration file was refused or did not start (the daemon "
            "runs an older one), else 1",
        )
        ok.add_metric([], 1.0 if self.successful else 0.0)
        at = GaugeMetricFamily(
            "loghubd_config_last_reload_success_timestamp_seconds",
            "When the running configuration was loaded (Unix time)",
        )
        at.add_metric([], self.loaded_at)
        return [ok, at]


def labelled_by_source(
    sources: Sequence[tuple[str, CollectorRegistry]], config: ConfigReloads | None = None
) -> CollectorRegistry:
    """The daemon's `/metrics`: every source's series labelled `source=<name>` (`exposed`),
    and the configuration's reload state (`ConfigReloads`)."""
    registry = exposed(sources)
    if config is not None:
        registry.register(config)
    return registry


class _Collected:
    """Families already read, for `generate_latest`."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families


class Exposed(CollectorRegistry):
    """`exposed`'s registry. It keeps its collectors in order, so that a scrape can read them
    (`read`) apart from relabelling and writing what it read (`render`)."""

    def __init__(self) -> None:
        super().__init__(auto_describe=False)
        self._order: list[Any] = []

    def register(self, collector: Any) -> None:
        super().register(collector)
        self._order.append(collector)

    def unregister(self, collector: Any) -> None:
        super().unregister(collector)
        self._order.remove(collector)

    def read(self) -> list[tuple[bool, Any]]:
        """Each collector's families, in order, with whether they are `_BySource`'s as read
        (to be relabelled) rather than finished families."""
        return [
            (True, c.read()) if isinstance(c, _BySource) else (False, list(c.collect()))
            for c in self._order
        ]

    @staticmethod
    def render(read: list[tuple[bool, Any]]) -> bytes:
        """The text of what `read` returned: relabelled and written, touching nothing else."""
        families: list[Metric] = []
        for relabel, part in read:
            families.extend(_BySource.merge(part) if relabel else part)
        return generate_latest(_Collected(families))


async def exposition(registry: CollectorRegistry) -> bytes:
    """`registry` in the Prometheus text format, for a `/metrics` answer. The collectors run on
    the event loop, since they look at state the loop changes; relabelling by source and
    writing the text run in a worker thread, on objects built for this scrape that no one else
    holds. At 256 shards (12,000 lines, 200-360 ms a scrape on a 2-core machine) reading is
    about 70 ms of that, relabelling 30-100 and writing (prometheus_client, ~10 µs a line)
    85-115: time the loop could not heartbeat, pull or commit in."""
    if isinstance(registry, Exposed):
        read = registry.read()
        return await asyncio.to_thread(registry.render, read)
    families = list(registry.collect())
    return await asyncio.to_thread(generate_latest, _Collected(families))


def _total(counter: Counter) -> int:
    """The sum of a labelled counter's series."""
    return int(
        sum(
            sample.value
            for metric in counter.collect()
            for sample in metric.samples
            if sample.name.endswith("_total")
        )
    )
