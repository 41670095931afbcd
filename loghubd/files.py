"""Writing to files completely (`os.write` may write less than it was given), and whole or not
at all (a temporary file renamed into place)."""

from __future__ import annotations

import fcntl
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of `data` to `fd`, however many calls it takes."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def fsync_dir(directory: Path) -> None:
    """Make the names in `directory` durable (a rename, a new file)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def lock_exclusive(path: Path) -> int | None:
    """Open (or make) `path` and take an exclusive `flock` on it without waiting: the file
    descriptor that holds it (closing it, or the process ending, releases it), or None when
    another open file holds it (another process, or another open in this one). A symlink at
    `path` is refused (OSError, ELOOP), never followed to make or lock the file it names."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd


def prove_writable(directory: Path) -> None:
    """Make `directory` (with its parents) and a file in it, then remove the file: an
    OSError says why an output directory cannot be used, before anything is written."""
    probe = directory / f".loghubd-probe-{os.getpid()}"
    directory.mkdir(parents=True, exist_ok=True)
    os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    os.unlink(probe)


def atomic_write(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Create or replace `path` with `data`, whole or not at all (`write_atomically`)."""
    write_atomically(path, lambda fd: write_all(fd, data), mode=mode)


def write_atomically(
    path: Path, write: Callable[[int], T], *, sync: bool = True, mode: int = 0o644
) -> T:
    """Create or replace `path` with what `write(fd)` writes, whole or not at all: into a
    temporary file of its own beside it (a hidden name, never mistaken for the file; two
    writers of one path never share it), fsynced, renamed over it, and the directory
    fsynced (`sync=False`: neither fsync). A failed write leaves the old file (or none) and
    no temporary file. Returns what `write` returned. `mode`: the new file's permissions
    (less what the umask takes away)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        try:
            result = write(fd)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if sync:
        fsync_dir(path.parent)
    return result
