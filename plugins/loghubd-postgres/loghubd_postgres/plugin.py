"""The `postgres` processor's registration and per-daemon factory.

`create(options)` parses the `[processor.postgres]` table and checks the database (reachable,
table and columns as mapped, positions table created): bad configuration stops the daemon at
start with the key and the reason. `bind(context)` gives the factory the group, logstore and
consumer that key the stored positions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from loghubd import ProcessorContext, ProcessorSpec, hookimpl
from loghubd_postgres import schema
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

    def bind(self, context: ProcessorContext) -> None:
        self.context = context

    def __call__(self, shard: int) -> PostgresProcessor:
        if self.context is None:
            raise RuntimeError("postgres: the daemon did not bind the processor to its source")
        return PostgresProcessor(self.options, self.statements, self.encoder, self.context, shard)


@hookimpl
def loghubd_register_processors() -> Iterable[ProcessorSpec]:
    return [
        ProcessorSpec(
            "postgres",
            PostgresFactory,
            "rows into a PostgreSQL table by COPY, exactly once",
            {
                "dsn": "libpq connection URI or key=value string (required)",
                "table": "table or schema.table the rows go to (required)",
                "columns": "column = type, or {field, type}: typed columns from log fields",
                "rest_column": "jsonb column for the fields no column maps",
                "document_column": "jsonb column for the whole log (log, if nothing mapped)",
                "create_table": "create the table from the mapping (false)",
                "positions_table": "where shard positions are stored (loghubd_positions)",
                "retry_initial_backoff_s": "first wait reconnecting (0.2)",
                "retry_max_backoff_s": "longest wait reconnecting (10.0)",
                "connect_timeout_s": "per connection attempt (10.0)",
            },
        )
    ]
