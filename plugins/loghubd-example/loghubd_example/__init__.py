"""The `grep` processor: keep the logs whose `field` contains `pattern`.

Shows the whole plugin surface: a hook implementation returning a ProcessorSpec, option
checks with `loghubd.processors.options` (every bad key of the table reported at once, each
named), a per-shard processor that saves its checkpoint only after its output is written, and
`flush()` to make that output durable before a commit.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from loghubd import Batch, ProcessorSpec, Tracker, hookimpl
from loghubd.processors.options import ConfigError, option_problem, typed_options

OPTIONS = {
    "field": "the log field to look in (required)",
    "pattern": "the substring a kept log's field contains (required)",
    "path": "directory of the output, shard-<n>.jsonl each (required)",
}


class GrepProcessor:
    def __init__(self, field: str, pattern: str, directory: Path, shard: int) -> None:
        self.field, self.pattern = field, pattern
        self.path = directory / f"shard-{shard}.jsonl"
        self.file: Any = None
        self.kept = self.dropped = 0

    def initialize(self, shard: int) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - lives with the shard

    def process(self, batch: Batch, tracker: Tracker) -> None:
        for record in batch.logs():
            if self.pattern in str(record.get(self.field, "")):
                self.file.write(json.dumps(record) + "\n")
                self.kept += 1
            else:
                self.dropped += 1
        self.file.flush()
        tracker.save_checkpoint(persist=False)

    def flush(self) -> None:
        os.fsync(self.file.fileno())

    def shutdown(self, tracker: Tracker) -> None:
        self.flush()
        self.file.close()


class GrepFactory:
    def __init__(self, options: Mapping[str, Any]) -> None:
        # Every problem of the table in one ConfigError (a ValueError), so that check-config
        # prints them all: unknown keys (with "did you mean"), wrong types, missing values.
        problems: list[str] = []
        given = typed_options("grep", options, dict.fromkeys(OPTIONS, str), problems)
        for key in OPTIONS:
            if key not in options:
                problems.append(option_problem("grep", key, "required"))
            elif given.get(key) == "":
                problems.append(option_problem("grep", key, "must not be empty"))
        if problems:
            raise ConfigError(problems)
        self.field, self.pattern = given["field"], given["pattern"]
        self.directory = Path(given["path"])

    def __call__(self, shard: int) -> GrepProcessor:
        return GrepProcessor(self.field, self.pattern, self.directory, shard)


@hookimpl
def loghubd_register_processors() -> list[ProcessorSpec]:
    return [ProcessorSpec("grep", GrepFactory, "keep logs whose field contains a pattern", OPTIONS)]
