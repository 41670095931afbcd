"""A failed file operation as the operator reads it: what was being done, to which path, and
why, e.g. `cannot write /var/out/shard-0.jsonl: Operation not permitted (EPERM)`.

What a processor raises reaches the operator as `loghubd.errors.describe_error(exc)`: the
logs, `/status` (`processor_error`), `/readyz` and the dead letter's note (`dead-letters list`)
all show that text, and it is the exception's `repr`. An `os.write` or `os.fsync` on a file
descriptor fails with an OSError that names no file (`PermissionError(1, 'Operation not
permitted')`), and even one that has a filename leaves it out of its repr. `doing(action,
path)` turns an OSError escaping its block into a `FileError` whose str() and repr() are that
one line. It stays what it was for code that looks at the type: an instance of the same
built-in class (`PermissionError`, `FileNotFoundError`, ... or plain `OSError`), with the same
errno and strerror, and the original as its `__cause__`.
"""

from __future__ import annotations

import contextlib
import errno as errnos
import os
from collections.abc import Iterator
from typing import Any

StrPath = str | os.PathLike[str]


class FileError(OSError):
    """An OSError that says, in words, what failed on which file."""

    def __init__(
        self, action: str, path: StrPath, cause: OSError, to: StrPath | None = None
    ) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause), os.fspath(path))
        if to is not None:
            self.filename2 = os.fspath(to)
        self.action = action
        # Where the failure really was, when it is not `path` (the directory a write could
        # not make, the temporary file an atomic write was writing).
        at = cause.filename
        if at is not None and not isinstance(at, int):  # (never a descriptor, in principle)
            at = os.fsdecode(at)
        self.at = None if at is None or at == self.filename else str(at)

    def __str__(self) -> str:
        target = self.filename if self.filename2 is None else f"{self.filename} to {self.filename2}"
        reason = self.strerror or ""
        # pyarrow's: "Failed renaming 'a' to 'b'. Detail: [errno 1] Operation not permitted";
        # the detail only, when the paths are said already.
        head, sep, detail = reason.rpartition(". Detail: ")
        said = f"'{self.filename}'" in head and (
            self.filename2 is None or f"'{self.filename2}'" in head
        )
        if said and sep and detail.startswith(f"[errno {self.errno}] "):
            reason = detail.partition("] ")[2]
        if self.errno is not None and self.errno in errnos.errorcode:
            reason += f" ({errnos.errorcode[self.errno]})"
        if self.at is not None:
            reason = f"{self.at}: {reason}"
        return f"cannot {self.action} {target}: {reason}"

    # `describe_error` shows the repr: the message is what the operator should read there.
    __repr__ = __str__

    def __reduce__(self) -> tuple[Any, ...]:
        cause = OSError(self.errno, self.strerror, self.at)
        return (failed, (self.action, self.filename, cause, self.filename2))


_KINDS: dict[type[OSError], type[FileError]] = {OSError: FileError}


def _kind(base: type[OSError]) -> type[FileError]:
    """FileError that is also `base` (PermissionError, ...), so `except PermissionError` and
    `isinstance` still see what the operation raised. Made once per class, on first use."""
    kind = _KINDS.get(base)
    if kind is None:
        kind = _KINDS.setdefault(
            base, type(base.__name__, (FileError, base), {"__module__": __name__})
        )
    return kind


def failed(action: str, path: StrPath, cause: OSError, to: StrPath | None = None) -> FileError:
    """`cause` as a FileError saying `cannot <action> <path>[ to <to>]: ...`; `cause` itself
    if it is one already (the innermost operation knows best what failed)."""
    if isinstance(cause, FileError):
        return cause
    base: type[OSError] = OSError
    for c in type(cause).__mro__:  # pyarrow's, a subclass of ours: the built-in it is
        if c.__module__ == "builtins" and issubclass(c, OSError):
            base = c
            break
    return _kind(base)(action, path, cause, to)


@contextlib.contextmanager
def doing(action: str, path: StrPath, to: StrPath | None = None) -> Iterator[None]:
    """Raise an OSError escaping the block as `failed(action, path, it, to)`."""
    try:
        yield
    except OSError as exc:
        raised = failed(action, path, exc, to)
        if raised is exc:
            raise
        raise raised from exc
