"""The `postgres` processor's per-daemon factory.

`PostgresFactory(options)` parses the `[processor.postgres]` table and checks the database
(reachable, missing tables created, privileges, columns as mapped): bad configuration stops
the daemon at start with the key and the reason. `bind(context)` gives the factory the group,
logstore and consumer that key the stored positions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry

from loghubd import ProcessorContext
from loghubd_postgres import schema
from loghubd_postgres.metrics import PostgresMetrics
from loghubd_postgres.options import parse
from loghubd_postgres.rows import RowEncoder
from loghubd_postgres.sink import PostgresProcessor, Statements


class PostgresFactory:
    def __init__(self, options: Mapping[str, Any]) -> None:
        self.options = parse(options)
        schema.check(self.options)
        self.statements = Statements(self.options)
        self.encoder = RowEncoder(self.options)
        self.context: ProcessorContext | None = None
        self.metrics = PostgresMetrics(CollectorRegistry())  # bind() puts them on the daemon's

    def bind(self, context: ProcessorContext) -> None:
        self.context = context
        self.metrics = context.instruments(PostgresMetrics)

    def __call__(self, shard: int) -> PostgresProcessor:
        if self.context is None:
            raise RuntimeError("postgres: the daemon did not bind the processor to its source")
        return PostgresProcessor(
            self.options, self.statements, self.encoder, self.context, shard, self.metrics
        )
