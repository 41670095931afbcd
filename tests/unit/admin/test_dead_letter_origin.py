"""Dead letters of several sources in one directory: each note says where its batch came
from, `loghubd dead-letters` takes only the given source's letters (a replay through one
source's processor never takes another logstore's logs), a batch set aside twice (after a
crash) is one letter, and a processor failing on one shard fails only that shard's letters."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from loghubd import Tracker
from loghubd.admin.deadletters import find, replay, scan
from loghubd.consumer.processing import RetryPolicy, _write_dead_letter
from loghubd.models import Batch
from loghubd.plugins.loaded import load_factory
from loghubd.protocol import cursor as cursors
from tests.conftest import file_mode
from tests.unit.admin.test_dead_letter_dirs import dead_letters
from tests.unit.admin.test_replay_declined import log_groups

CONFIG = """
[consumer]
on_failure = "dead_letter"
max_attempts = 3
dead_letter_dir = "{letters}"

[[sources]]
name = "alpha"
endpoint = "http://127.0.0.1:1"
project = "proj"
logstore = "alpha"
[sources.consumer]
group = "grp"
[sources.processor]
name = "jsonl"
[sources.processor.jsonl]
path = "{out}/alpha"

[[sources]]
name = "beta"
endpoint = "http://127.0.0.1:1"
project = "proj"
logstore = "beta"
[sources.consumer]
group = "grp"
[sources.processor]
name = "jsonl"
[sources.processor.jsonl]
path = "{out}/beta"
"""


def policy(letters: Path, logstore: str) -> RetryPolicy:
    origin = (("group", "grp"), ("logstore", logstore), ("project", "proj"))
    return RetryPolicy(on_failure="dead_letter", dead_letter_dir=letters, origin=origin)


def batch(shard: int = 0, first: int = 0) -> Batch:
    raw = log_groups(2)
    start, end = cursors.from_seq(shard, first), cursors.from_seq(shard, first + 2)
    return Batch(shard, start, end, raw, 2, len(raw))


def set_aside(letters: Path, logstore: str, shard: int = 0) -> Path:
    return _write_dead_letter(
        policy(letters, logstore), batch(shard), RuntimeError("down"), 3, False
    )


def test_each_source_lists_and_replays_only_its_own_letters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    letters, out = tmp_path / "dl", tmp_path / "out"
    alpha, beta = set_aside(letters, "alpha"), set_aside(letters, "beta")
    assert json.loads(alpha.read_text())["origin"]["logstore"] == "alpha"
    config = tmp_path / "c.toml"
    config.write_text(CONFIG.format(letters=letters, out=out))

    code, text, _ = dead_letters(capsys, "list", "-c", str(config), "--source", "alpha")
    assert code == 0 and f"{beta}  another source's: proj/beta group grp" in text, text
    assert "1 dead letter(s) for proj/alpha group grp in" in text and "1 of other" in text

    code, text, err = dead_letters(capsys, "replay", "-c", str(config), "--source", "alpha")
    assert code == 0 and "replayed 1 of 1" in text, text + err
    assert not alpha.exists() and beta.exists(), "beta's letter is not alpha's to replay"
    assert not (out / "beta").exists() or not any((out / "beta").iterdir())

    code, text, err = dead_letters(capsys, "replay", "-c", str(config), "--source", "beta")
    assert code == 0 and "replayed 1 of 1" in text, text + err
    assert scan(letters).letters == []
    written = {p.parent.name for p in out.glob("*/shard-0.replay-*.jsonl")}
    assert written == {"alpha", "beta"}


def test_a_batch_set_aside_again_after_a_crash_is_one_letter(tmp_path: Path) -> None:
    letters = tmp_path / "dl"
    first = set_aside(letters, "alpha")
    other = set_aside(letters, "beta")  # the same range of another logstore stays
    again = set_aside(letters, "alpha")
    found = scan(letters)
    assert sorted(d.note for d in found.letters) == sorted([again, other])
    assert not first.exists() and not first.with_suffix(".pb").exists()
    assert found.incomplete == []


class FailsOn:
    """Takes every batch, but its `stage` fails on shard 0."""

    def __init__(self, shard: int, stage: str) -> None:
        self.shard, self.stage = shard, stage

    def _maybe_fail(self, stage: str) -> None:
        if self.shard == 0 and stage == self.stage:
            raise OSError(f"{stage} fails on shard 0")

    def initialize(self, shard: int) -> None:
        self._maybe_fail("initialize")

    def process(self, batch: Batch, tracker: Tracker) -> None:
        tracker.save_checkpoint()

    def flush(self) -> None:
        self._maybe_fail("flush")

    def shutdown(self, tracker: Tracker) -> None:
        self._maybe_fail("shutdown")


@pytest.mark.parametrize("stage", ["initialize", "flush", "shutdown"])
def test_a_processor_failing_on_one_shard_fails_only_that_shards_letters(
    tmp_path: Path, stage: str
) -> None:
    """Shard 0's letters stay, with the reason; shard 1's are replayed and removed."""
    letters = tmp_path / "dl"
    on_zero, on_one = set_aside(letters, "alpha", 0), set_aside(letters, "alpha", 1)
    factory = load_factory("fails", lambda shard: FailsOn(shard, stage))
    ok, failures = anyio.run(replay, factory, find(letters))
    assert ok == 1 and len(failures) == 1, failures
    assert failures[0].startswith(f"{on_zero}: ") and f"{stage} fails on shard 0" in failures[0]
    assert on_zero.exists() and not on_one.exists()


@pytest.mark.usefixtures("umask_022")
def test_letters_are_not_readable_by_other_users(tmp_path: Path) -> None:
    """A dead letter is the raw batch: owner and group only, whatever the output's modes."""
    letters = tmp_path / "dl"
    note = set_aside(letters, "alpha")
    for path in (note, note.with_suffix(".pb")):
        assert file_mode(path) == 0o640, path
    assert (file_mode(letters), file_mode(note.parent)) == (0o750, 0o750)
