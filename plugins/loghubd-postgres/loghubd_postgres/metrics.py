"""The `postgres` processor's own series, on the source's registry (the daemon serves them on
`/metrics` with the source's label; docs/metrics.md lists the core's and the built-in sinks').

A database that is down shows here as `loghubd_postgres_unavailable_total` rising while the
processor waits and retries; one that is up but cannot take a batch now (a lock, a timeout)
or until it is changed (a GRANT, a column) as `loghubd_postgres_retries_total{reason}`.
Otherwise only the stalled checkpoint would say so."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

OUTCOMES = (
    "written",
    "already_written",
    "table_ahead",
    "skipped_replayed",
    "replayed",
    "already_replayed",
)
# The conditions most often retried (`failures.condition`); others appear when they happen.
RETRY_REASONS = (
    "LockNotAvailable",
    "QueryCanceled",
    "DeadlockDetected",
    "SerializationFailure",
    "DiskFull",
    "InsufficientPrivilege",
    "UndefinedTable",
    "UndefinedColumn",
)
_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class PostgresMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.rows = Counter(
            "loghubd_postgres_written_rows_total",
            "Rows committed with their shard's position",
            registry=r,
        )
        self.batches = Counter(
            "loghubd_postgres_batches_total",
            "Batches by outcome: written; already_written (the stored position is its end);"
            " table_ahead (the shard re-reads from the stored position); skipped_replayed"
            " (a replayed dead letter's rows skipped, the rest written); replayed and"
            " already_replayed (dead letters handed back by `loghubd dead-letters replay`)",
            ["outcome"],
            registry=r,
        )
        for outcome in OUTCOMES:
            self.batches.labels(outcome)
        self.seconds = Histogram(
            "loghubd_postgres_transaction_duration_seconds",
            "One batch's transaction: position lock, COPY, position update, commit",
            buckets=_SECONDS,
            registry=r,
        )
        self.unavailable = Counter(
            "loghubd_postgres_unavailable_total",
            "Connection failures (PostgreSQL down, restarting, full, read-only after a "
            "failover, a session killed), each retried",
            registry=r,
        )
        self.retries = Counter(
            "loghubd_postgres_retries_total",
            "Batches tried again over a reachable server's error, by its condition: one that "
            "passes (LockNotAvailable, QueryCanceled, DeadlockDetected, DiskFull, ...) or one "
            "that lasts until the database is changed (InsufficientPrivilege, UndefinedTable, "
            "UndefinedColumn, ...)",
            ["reason"],
            registry=r,
        )
        # At 0 from the start, so that the first retry is an increase (a series born at 1 is
        # not one for `increase()`) and a dashboard has a series before anything failed.
        for reason in RETRY_REASONS:
            self.retries.labels(reason)
