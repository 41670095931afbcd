"""One processor at a time writes a directory's shard: a second one (another source with the
same path, another daemon) is refused at its start, until the first lets go (its shutdown, or
its process's end, even by kill -9)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import loghubd
from loghubd.processors.jsonl import JsonlFactory
from loghubd.testing import RecordingTracker, make_batch

HOLDER = """
import sys
from loghubd.processors.jsonl import JsonlFactory
p = JsonlFactory({"path": sys.argv[1]})(0)
p.initialize(0)
print("holding", flush=True)
sys.stdin.read()
"""


def test_a_second_processor_of_the_same_shard_and_path_cannot_start(tmp_path: Path) -> None:
    options = {"path": str(tmp_path), "rotate_bytes": 1000}
    first, second = JsonlFactory(options)(0), JsonlFactory(options)(0)
    first.initialize(0)
    with pytest.raises(RuntimeError, match="another processor") as refused:
        second.initialize(0)
    assert str(tmp_path / "shard-0.jsonl") in str(refused.value)
    second.shutdown(RecordingTracker())  # as the daemon does after a failed start
    other_shard = JsonlFactory(options)(1)
    other_shard.initialize(1)  # another shard in the same directory is another file
    first.process(make_batch([{"i": "1"}]), RecordingTracker())
    first.shutdown(RecordingTracker())
    other_shard.shutdown(RecordingTracker())
    third = JsonlFactory(options)(0)
    third.initialize(0)  # let go at shutdown: the next start (the daemon's retry) succeeds
    third.process(make_batch([{"i": "2"}]), RecordingTracker())
    third.shutdown(RecordingTracker())
    lines = (tmp_path / "shard-0.jsonl").read_bytes().splitlines()
    assert [b'"i": "1"' in lines[0], b'"i": "2"' in lines[1]] == [True, True]


def test_another_daemon_holds_the_shard_until_it_is_killed(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(loghubd.__file__).parents[1])}
    with subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    ) as holder:
        try:
            assert holder.stdout is not None and holder.stdout.readline() == b"holding\n"
            p = JsonlFactory({"path": str(tmp_path)})(0)
            with pytest.raises(RuntimeError, match="or another daemon"):
                p.initialize(0)
            p.shutdown(RecordingTracker())
        finally:
            holder.send_signal(signal.SIGKILL)
            holder.wait()
    p = JsonlFactory({"path": str(tmp_path)})(0)
    p.initialize(0)  # a killed daemon leaves a lock file, but no lock
    p.shutdown(RecordingTracker())


def test_a_directory_removed_and_made_again_is_still_one_writers(tmp_path: Path) -> None:
    """The flock is on the lock file's inode: with the directory deleted (and made again) a
    second processor took a fresh lock file and appended to the same file as the first
    (file sinks audit: 29,010 lines for 16,010 ids). The first takes the lock again at its
    next batch, making the directory if it is gone, so the second is refused; and if the
    second got there first, the first's batch fails instead of writing beside it."""
    import shutil

    out = tmp_path / "out"
    first = JsonlFactory({"path": str(out)})(0)
    first.initialize(0)
    first.process(make_batch([{"i": "1"}]), RecordingTracker())
    shutil.rmtree(out)
    first.process(make_batch([{"i": "2"}]), RecordingTracker())  # directory and lock again
    second = JsonlFactory({"path": str(out)})(0)
    with pytest.raises(RuntimeError, match="another processor"):
        second.initialize(0)
    second.shutdown(RecordingTracker())

    shutil.rmtree(out)
    out.mkdir()
    third = JsonlFactory({"path": str(out)})(0)
    third.initialize(0)  # the lock file is new: it is free, and third has it
    with pytest.raises(RuntimeError, match="another processor"):
        first.process(make_batch([{"i": "3"}]), RecordingTracker())
    third.process(make_batch([{"i": "4"}]), RecordingTracker())
    third.shutdown(RecordingTracker())
    first.shutdown(RecordingTracker())
    lines = (out / "shard-0.jsonl").read_bytes().splitlines()
    assert len(lines) == 1 and b'"i": "4"' in lines[0], lines
