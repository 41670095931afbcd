"""Built-in processors, registered through the same hook as any external plugin.

- ``jsonl``: one file of JSON lines per shard under ``path`` (loghubd/processors/jsonl.py).
- ``stdout``: JSON lines on standard output (demos).
- ``null``: counts the logs and drops them (smoke tests, benchmarks); with ``records = true``
  it builds every log's dict first, as a real processor would; ``view = "jsonl"`` or
  ``"arrow"`` builds that view of each batch instead (docs/batch-views.md).
- ``http``: NDJSON POSTs to a URL, at least once (loghubd/processors/http.py).
- ``parquet``: Parquet files under a partition template, exactly once
  (loghubd/processors/parquet.py).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from loghubd import hookimpl
from loghubd.models import Batch
from loghubd.plugins.api import ProcessorFactory, ProcessorSpec, Tracker
from loghubd.processors.jsonl import JsonlFactory, JsonlProcessor
from loghubd.processors.options import check_options

# Kept importable from here: plugins and tests used these names before the processors moved.
__all__ = ["JsonlFactory", "JsonlProcessor", "check_options"]


class StdoutProcessor:
    _lock = threading.Lock()

    def initialize(self, shard: int) -> None:
        pass

    def process(self, batch: Batch, tracker: Tracker) -> None:
        with self._lock:
            sys.stdout.flush()  # anything written as text before goes first
            for chunk in batch.jsonl_chunks():
                sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
        tracker.save_checkpoint(persist=False)

    def shutdown(self, tracker: Tracker) -> None:
        pass


# null's `view`: what it builds of each batch before dropping it (benchmarks of each view)
VIEWS = ("count", "records", "jsonl", "arrow")


class NullProcessor:
    def __init__(self, records: bool = False, view: str = "") -> None:
        self.view = view or ("records" if records else "count")
        self.records = self.view == "records"
        self.count = 0

    def initialize(self, shard: int) -> None:
        pass

    def process(self, batch: Batch, tracker: Tracker) -> None:
        if self.view == "records":
            n = sum(1 for _record in batch.logs())
        elif self.view == "jsonl":
            n = sum(chunk.count(b"\n") for chunk in batch.jsonl_chunks())
        elif self.view == "arrow":
            n = batch.arrow().num_rows
        else:
            n = batch.log_count
        self.count += n
        tracker.save_checkpoint(persist=False)

    def shutdown(self, tracker: Tracker) -> None:
        pass


def _parquet(options: Mapping[str, Any]) -> ProcessorFactory:
    # Imported when used: pyarrow costs ~0.2 s and ~35 MB of RSS, which every daemon paid
    # at start-up when this module imported the parquet processor.
    from loghubd.processors.parquet import ParquetFactory

    return ParquetFactory(options)


def _http(options: Mapping[str, Any]) -> ProcessorFactory:
    # Imported when used: aiohttp's client (~0.15-0.25 s with its TLS contexts) is not needed
    # by the commands that only list or check processors.
    from loghubd.processors.http import HttpFactory

    return HttpFactory(options)


def _stdout(options: Mapping[str, Any]) -> ProcessorFactory:
    check_options("stdout", options, {})
    return lambda shard: StdoutProcessor()


def _null(options: Mapping[str, Any]) -> ProcessorFactory:
    check_options("null", options, {"records": bool, "view": str})
    records = bool(options.get("records", False))
    view = options.get("view", "")
    if view and view not in VIEWS:
        raise ValueError(f"processor.null.view: one of {', '.join(VIEWS)}, not {view!r}")
    if view and "records" in options and (view == "records") != records:
        raise ValueError("processor.null.records: contradicts processor.null.view")
    if view == "arrow":  # pyarrow's import (~0.3 s) at start-up, not in the first batch
        import loghubd.arrow_view  # noqa: F401
    return lambda shard: NullProcessor(records, view)


@hookimpl
def loghubd_register_processors() -> Iterable[ProcessorSpec]:
    return [
        ProcessorSpec(
            "jsonl",
            JsonlFactory,
            "JSON lines, one file per shard, fsynced",
            {
                "path": "directory of the output, shard-<n>.jsonl each (required)",
                "fsync": "interval | batch | never: when the file is fsynced (interval)",
                "rotate_bytes": "close the file once it holds this many bytes (0: never)",
                "rotate_seconds": "close the file this long after it was opened (0: never)",
                "compress": "none | gzip | zstd: compress each closed file (none)",
            },
        ),
        ProcessorSpec("stdout", _stdout, "JSON lines on standard output"),
        ProcessorSpec(
            "null",
            _null,
            "count the logs, keep nothing",
            {"records": "build every log's dict first, as a real processor would (false)"},
        ),
        ProcessorSpec(
            "http",
            _http,
            "NDJSON POSTs to a URL, at least once",
            {
                "url": "http:// or https:// endpoint (required)",
                "headers": "extra request headers (table of strings)",
                "bearer_token": "sends Authorization: Bearer <token>",
                "gzip": "gzip request bodies (false)",
                "batch_size": "logs per request (1000)",
                "max_body_bytes": "NDJSON bytes per request before gzip (4 MiB; 0: no limit)",
                "concurrency": "requests in flight per shard (2)",
                "timeout_s": "per request, connection included (30.0)",
                "retry_initial_backoff_s": "first wait between retries (0.5)",
                "retry_max_backoff_s": "longest wait between retries (30.0)",
                "max_retries": "retryable failures in a row before the batch fails (0: for ever)",
                "retry_statuses": "more 4xx statuses to retry, e.g. [401, 403] (5xx, 408, 429 are)",
                "tls_ca_file": "PEM CA bundle to verify an https endpoint (the system's CAs)",
                "tls_cert_file": "client certificate, PEM, for mutual TLS (none)",
                "tls_key_file": "its private key, if not in tls_cert_file (none)",
                "tls_verify": "verify the endpoint's certificate (true)",
            },
        ),
        ProcessorSpec(
            "parquet",
            _parquet,
            "Parquet files, partitioned, exactly once",
            {
                "path": "directory or pyarrow file system URI (required)",
                "wal_dir": "local write-ahead log directory (required for a URI path)",
                "partition": "directory template ({logstore}/dt={date}/hour={hour}/)",
                "fields": "field columns to write, in order (every field of the batch)",
                "compression": "zstd, snappy, gzip, lz4, brotli or none (zstd)",
                "compression_level": "the codec's level (its default)",
                "statistics": 'min/max for "time" columns, "all", "none" or a list ("time")',
                "dictionary_page_bytes": "a column's dictionary limit, then plain (65536)",
                "max_rows": "rows buffered per shard before a write (1000000)",
                "max_bytes": "Arrow bytes buffered per shard before a write (268435456)",
                "max_age_s": "seconds the oldest buffered batch may wait (60.0)",
                "max_buffered_bytes": "Arrow bytes all shards may buffer: the largest writes"
                " past it (512 MiB)",
            },
        ),
    ]
