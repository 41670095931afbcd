"""`loghubd.server.datadir`: one holder of a data directory at a time, a lock no child process
keeps, and a refusal that names the holder (or the file in the way)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loghubd.server import datadir


def test_a_second_holder_is_refused_naming_the_first_and_may_hold_it_once_released(
    tmp_path: Path,
) -> None:
    with datadir.held(tmp_path):
        assert (tmp_path / datadir.LOCK_FILE).read_text() == f"{os.getpid()}\n"
        with contextlib.ExitStack() as stack, pytest.raises(datadir.DataDirInUse) as refused:
            stack.enter_context(datadir.held(tmp_path))
    assert refused.value.pid == os.getpid()
    assert str(refused.value) == (
        f"--data-dir {tmp_path} is in use by another loghubd serve (pid {os.getpid()}); "
        f"stop it, or give another --data-dir"
    )
    with datadir.held(tmp_path):
        pass


def test_a_child_process_does_not_keep_the_lock(tmp_path: Path) -> None:
    """A child started while the lock is held (even asked to keep every inheritable fd) does
    not hold it once the holder lets it go."""
    with datadir.held(tmp_path) as fd:
        assert not os.get_inheritable(fd)
        child = subprocess.Popen(
            [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(30)"],
            close_fds=False,
            stdout=subprocess.PIPE,
        )
    try:
        # Running its own code: past the exec that closed what it must not inherit (Popen may
        # return a moment before the kernel has let go of those descriptors).
        assert child.stdout is not None and child.stdout.readline() == b"up\n"
        with datadir.held(tmp_path):
            assert child.poll() is None  # the child still runs, and the lock is free
    finally:
        child.kill()
        child.communicate()


def test_a_holder_that_has_not_written_its_pid_is_named_without_one(tmp_path: Path) -> None:
    with datadir.held(tmp_path):
        (tmp_path / datadir.LOCK_FILE).write_text("")  # as just after another's flock
        with contextlib.ExitStack() as stack, pytest.raises(datadir.DataDirInUse) as refused:
            stack.enter_context(datadir.held(tmp_path))
    assert refused.value.pid is None
    assert "in use by another loghubd serve; stop it" in str(refused.value)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("a-file", "--data-dir {tmp}/a-file is not a directory; give a directory"),
        (
            "a-file/data",
            "--data-dir {tmp}/a-file/data cannot be made: {tmp}/a-file is not a directory",
        ),
        (
            "a-file/data/deeper",
            "--data-dir {tmp}/a-file/data/deeper cannot be made: {tmp}/a-file is not a directory",
        ),
    ],
)
def test_a_file_where_the_directory_should_be_is_named(
    tmp_path: Path, given: str, message: str
) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    with contextlib.ExitStack() as stack, pytest.raises(datadir.DataDirUnusable) as refused:
        stack.enter_context(datadir.held(tmp_path / given))
    assert str(refused.value) == message.format(tmp=tmp_path)
    assert (tmp_path / "a-file").read_text() == "not a directory"
