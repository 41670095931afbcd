"""Fixtures shared by the unit and integration tests."""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


@pytest.fixture
def tiny_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A real 256 KiB tmpfs: a full disk for real. Needs root (`mount`), as the test machines
    run; fails naming the reason otherwise. Grow it with `mount -o remount,size=64m PATH`."""
    where = tmp_path / "tmpfs"
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if done.returncode:
        pytest.fail(f"this test needs `mount -t tmpfs` (root): {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


@pytest.fixture
def immutable() -> Iterator[Callable[[Path], None]]:
    """`immutable(path)`: `chattr +i path`, undone after the test. The tests run as root, whom
    file modes do not stop; this does: no write to the file, no new name in the directory.
    Skips the test on a file system without the attribute."""
    made: list[Path] = []

    def make(path: Path) -> None:
        done = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True)
        if done.returncode:
            pytest.skip(f"this test needs `chattr +i` on {path}: {done.stderr.strip()}")
        made.append(path)

    yield make
    for path in reversed(made):
        subprocess.run(["chattr", "-i", str(path)], check=False)


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The umask most systems give (0022: files 0644, directories 0755), for this process and
    the children it starts, so that a test of file modes does not depend on the runner's."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def file_mode(path: Path) -> int:
    """The permission bits of `path` (0o644, ...)."""
    return stat.S_IMODE(path.stat().st_mode)
