"""Prometheus metrics of `loghubd serve`, on a registry of its own (no globals)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from loghubd.ops.metrics import exposed

if TYPE_CHECKING:
    from loghubd.server.service import LogService


class ServerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        # What /metrics serves: these plus process metrics and build info, no *_created.
        self.exposed = exposed([(None, self.registry)])
        self.requests = Counter(
            "loghubd_server_requests_total",
            "API requests answered, by API and HTTP status",
            ["api", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "loghubd_server_request_duration_seconds",
            "Time to answer an API request",
            ["api"],
            registry=self.registry,
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0),
        )

        self.ingest_logs = Counter(
            "loghubd_server_ingest_logs_total",
            "Logs accepted by PutLogs",
            ["project", "logstore"],
            registry=self.registry,
        )
        self.ingest_bytes = Counter(
            "loghubd_server_ingest_bytes_total",
            "Raw LogGroup bytes accepted by PutLogs",
            ["project", "logstore"],
            registry=self.registry,
        )

    def watch(self, service: LogService) -> None:
        """Expose stored bytes and consumer-group state, read from `service` at scrape time."""
        self.registry.register(_StateCollector(lambda: service))

    def observe(self, api: str, status: int, seconds: float) -> None:
        self.requests.labels(api, str(status)).inc()
        self.latency.labels(api).observe(seconds)


class _StateCollector(Collector):
    def __init__(self, service: Callable[[], LogService]) -> None:
        self._service = service

    def collect(self) -> Iterable[Metric]:
        service = self._service()
        stored = GaugeMetricFamily(
            "loghubd_server_stored_bytes",
            "LogGroup bytes retained per shard",
            labels=["project", "logstore", "shard"],
        )
        consumers = GaugeMetricFamily(
            "loghubd_server_group_consumers",
            "Live consumers per consumer group",
            labels=["project", "logstore", "group"],
        )
        states = GaugeMetricFamily(
            "loghubd_server_group_shards",
            "Shards per consumer group and coordinator state",
            labels=["project", "logstore", "group", "state"],
        )
        for ls in service.storage.all_logstores():
            for shard in service.storage.list_shards(ls.id):
                stored.add_metric([ls.project, ls.name, str(shard.shard_id)], shard.stored_bytes)
            for group in service.loaded_groups(ls.id):
                consumers.add_metric([ls.project, ls.name, group.name], len(group.consumers))
                counts: dict[str, int] = {}
                for entry in group.shards.values():
                    counts[entry.state.value] = counts.get(entry.state.value, 0) + 1
                for state, n in sorted(counts.items()):
                    states.add_metric([ls.project, ls.name, group.name, state], n)
        yield stored
        yield consumers
        yield states
