"""The `grep` processor's tests, written the way a plugin author writes them with
`loghubd.testing`: unit tests on batches built from given logs with a recording tracker,
and one end-to-end run of a real daemon against the `loghubd_server` fixture (a real
`loghubd serve` process, started for the test and killed after it)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from loghubd_example import GrepFactory

from loghubd.processors.options import ConfigError
from loghubd.testing import RecordingTracker, ServerProcess, make_batch


def read(path: Path) -> list[dict[str, str]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_keeps_matching_logs_and_saves_the_checkpoint_after_writing(tmp_path: Path) -> None:
    factory = GrepFactory({"field": "level", "pattern": "ERROR", "path": str(tmp_path)})
    processor = factory(shard=2)
    processor.initialize(2)
    batch = make_batch(
        [
            {"level": "ERROR", "msg": "disk full"},
            {"level": "INFO", "msg": "all good"},
            {"msg": "no level at all"},
            {"level": "MAYBE-ERROR", "msg": "contains the pattern"},
        ],
        shard=2,
        topic="app",
    )
    tracker = RecordingTracker()
    processor.process(batch, tracker)
    processor.shutdown(tracker)
    kept = read(tmp_path / "shard-2.jsonl")
    assert [r["msg"] for r in kept] == ["disk full", "contains the pattern"]
    assert kept[0]["__topic__"] == "app"
    assert (processor.kept, processor.dropped) == (2, 2)
    # one save_checkpoint, after the write, left to the flusher (persist=False)
    assert tracker.saved == [False] and tracker.finished


def test_a_batch_with_nothing_to_keep_is_still_finished(tmp_path: Path) -> None:
    processor = GrepFactory({"field": "level", "pattern": "ERROR", "path": str(tmp_path)})(0)
    processor.initialize(0)
    tracker = RecordingTracker()
    processor.process(make_batch([{"level": "INFO"}] * 250, group_size=100), tracker)
    processor.shutdown(tracker)
    assert tracker.finished and processor.dropped == 250
    assert (tmp_path / "shard-0.jsonl").read_text() == ""


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"field": "level", "pattern": "E", "path": "/tmp/x", "colour": "red"}, "grep.colour"),
        ({"field": "level", "path": "/tmp/x"}, "grep.pattern"),
        ({"field": "", "pattern": "E", "path": "/tmp/x"}, "grep.field"),
    ],
)
def test_bad_options_are_refused_naming_the_key(options: dict[str, str], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        GrepFactory(options)


def test_every_bad_key_is_reported_at_once() -> None:
    # One ConfigError (a ValueError) with a line per problem, as check-config prints them.
    with pytest.raises(ConfigError) as refused:
        GrepFactory({"field": "", "patern": "ERROR", "path": 5, "colour": "red"})
    assert refused.value.problems == (
        "processor.grep.patern: unknown key (did you mean processor.grep.pattern?)",
        "processor.grep.path: expected a string, got an integer 5",
        "processor.grep.colour: unknown key",
        "processor.grep.field: must not be empty",
        "processor.grep.pattern: required",
    )


def test_a_real_daemon_consumes_through_grep(tmp_path: Path, loghubd_server: ServerProcess) -> None:
    loghubd = [sys.executable, "-m", "loghubd"]
    produced = subprocess.run(
        [*loghubd, "produce", "--endpoint", loghubd_server.endpoint, "--project", "plugin-test",
         "--logstore", "app", "--count", "500", "--create-shards", "2"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    out = tmp_path / "errors"
    config = tmp_path / "loghubd.toml"
    # A bounded run: read what was written before `end`, then exit 0 by itself.
    config.write_text(f"""
[source]
endpoint = "{loghubd_server.endpoint}"
project = "plugin-test"
logstore = "app"
[consumer]
group = "grep-test"
end = {int(time.time()) + 1}
heartbeat_interval = 1.0
[processor]
name = "grep"
[processor.grep]
field = "level"
pattern = "ERROR"
path = "{out}"
[ops]
listen = "127.0.0.1:0"
""")
    run = subprocess.run(
        [*loghubd, "run", "-c", str(config)], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    kept = [r for f in sorted(out.glob("shard-*.jsonl")) for r in read(f)]
    # loghubd produce gives every 5th log (n % 5 == 4) level ERROR
    assert sorted(int(r["id"]) for r in kept) == list(range(4, 500, 5))
