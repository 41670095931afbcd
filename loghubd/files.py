"""Writing to file descriptors completely: `os.write` may write less than it was given."""

from __future__ import annotations

import os
import secrets
from pathlib import Path


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


def atomic_write(path: Path, data: bytes) -> None:
    """Create or replace `path` with `data`, whole or not at all: a temporary file of its own
    beside it (a hidden name, never mistaken for the file), fsynced, renamed over it, and the
    directory fsynced. A failed write leaves the old file (or none) and no temporary file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
