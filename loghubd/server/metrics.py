"""Prometheus metrics of `loghubd serve`, on a registry of its own (no globals)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram


class ServerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
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

    def observe(self, api: str, status: int, seconds: float) -> None:
        self.requests.labels(api, str(status)).inc()
        self.latency.labels(api).observe(seconds)
