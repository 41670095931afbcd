"""The data directory of `loghubd serve`: one server at a time, and a directory it can write.

Two servers on one directory would each keep their own consumer-group coordinator in memory
over the same SQLite store, and hand the same shards to different consumers. So a server holds
an exclusive `flock` on `serve.lock` in the directory for its whole life, taken before it
binds its port or writes anything else there; a second one finds it held and stops. The
kernel drops the lock when its holder ends, however it ends (`kill -9` included), so a lock
is never stale and the file is never removed: removing it would let a third server lock a new
file while the second still held the old one. The holder writes its pid into the file, only
for the second one's message. The descriptor is not inherited by child processes (Python
opens it close-on-exec), which would otherwise keep the lock past the server's end.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from loghubd.files import lock_exclusive, prove_writable, write_all

LOCK_FILE = "serve.lock"
PRIVATE_DIR_MODE = 0o700


def open_to_others(directory: Path) -> int | None:
    """The mode of `directory` if its group or others have any access to it (they may read
    the logs stored in it), else None (also when it cannot be read)."""
    try:
        mode = stat.S_IMODE(directory.stat().st_mode)
    except OSError:
        return None
    return mode if mode & 0o077 else None


class DataDirInUse(Exception):
    """Another `loghubd serve` (or another open of the lock in this process) holds it."""

    def __init__(self, directory: Path, pid: int | None) -> None:
        holder = f" (pid {pid})" if pid is not None else ""
        super().__init__(
            f"--data-dir {directory} is in use by another loghubd serve{holder}; "
            f"stop it, or give another --data-dir"
        )
        self.directory = directory
        self.pid = pid


class DataDirUnusable(Exception):
    """The directory cannot be made, locked or written; the message says why."""


@contextmanager
def held(directory: Path) -> Iterator[int]:
    """Make `directory` if needed (mode 0700), lock it and prove it writable; yields the
    lock's file descriptor, closed (the lock released) on exit. Raises DataDirInUse or
    DataDirUnusable."""
    try:
        # 0700: the stored logs are the owner's (an existing directory keeps its mode; the
        # server warns when others may enter it, `open_to_others`)
        directory.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as exc:
        raise DataDirUnusable(_not_a_directory(directory)) from exc
    except OSError as exc:
        raise _unusable(directory, exc) from exc
    path = directory / LOCK_FILE
    try:
        fd = lock_exclusive(path)
    except OSError as exc:
        raise _unusable(directory, exc) from exc
    if fd is None:
        raise DataDirInUse(directory, _holder(path))
    try:
        os.ftruncate(fd, 0)
        write_all(fd, f"{os.getpid()}\n".encode())
        prove_writable(directory)  # the lock file may be old: can files still be made here?
    except OSError as exc:
        os.close(fd)
        raise _unusable(directory, exc) from exc
    try:
        yield fd
    finally:
        os.close(fd)


def _holder(path: Path) -> int | None:
    """The pid the holder wrote (None before it wrote it, or if it cannot be read)."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _unusable(directory: Path, exc: OSError) -> DataDirUnusable:
    if exc.errno == errno.ENOTDIR:
        return DataDirUnusable(_not_a_directory(directory))
    return DataDirUnusable(
        f"--data-dir {directory} cannot be used: {exc.strerror or exc}; pick a writable directory"
    )


def _not_a_directory(directory: Path) -> str:
    """Name the file in the way: the directory itself, or the first of its parents."""
    for path in (*reversed(directory.parents), directory):
        if path.exists() and not path.is_dir():
            if path == directory:
                return f"--data-dir {directory} is not a directory; give a directory"
            return f"--data-dir {directory} cannot be made: {path} is not a directory"
    return f"--data-dir {directory} is not a directory; give a directory"
