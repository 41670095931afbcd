"""Writing to file descriptors completely: `os.write` may write less than it was given."""

from __future__ import annotations

import os
from pathlib import Path


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of `data` to `fd`, however many calls it takes."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def write_durably(path: Path, data: bytes) -> None:
    """Create or replace `path` with `data` and fsync it before returning."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
