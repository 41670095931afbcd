"""The `postgres` processor's registration (the module the `loghubd` entry point names).

Every daemon loads every installed plugin's entry point at start, whatever processor it
runs, so this module imports nothing heavy: psycopg and the factory
(`loghubd_postgres.factory`) are imported when a config asks for `postgres`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from loghubd import ProcessorSpec, hookimpl

if TYPE_CHECKING:
    from loghubd_postgres.factory import PostgresFactory


def create(options: Mapping[str, Any]) -> PostgresFactory:
    from loghubd_postgres.factory import PostgresFactory

    return PostgresFactory(options)


@hookimpl
def loghubd_register_processors() -> Iterable[ProcessorSpec]:
    return [
        ProcessorSpec(
            "postgres",
            create,
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
                "lock_timeout_s": "longest wait for a lock on the table, then retried (30.0)",
            },
        )
    ]
