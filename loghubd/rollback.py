"""What a reload's exec hands the fresh `loghubd run`: the configuration text the daemon ran
until then, so that a reloaded configuration which `check-config` accepted but which cannot
start (a logstore that does not exist, an `ops.listen` port already taken, keys the service
refuses) does not end the daemon: the fresh image starts again with the text that ran, once,
and reports the failed reload (`loghubd_config_last_reload_successful` 0, `/status`'s
`config`, a `reload_failed` log line). The next SIGHUP checks the file again as usual.

The text travels in an anonymous in-memory file (`memfd`) that the exec inherits, named by
the number of its descriptor in `LOGHUBD_RELOAD_STATE_FD`: a configuration may hold secrets,
which would otherwise sit in the process's environment. The new image reads and closes it at
once and drops the variable, so that nothing it starts inherits either.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import MutableMapping
from dataclasses import dataclass

STATE_FD_ENV = "LOGHUBD_RELOAD_STATE_FD"


@dataclass(frozen=True)
class ReloadState:
    previous: str  # the configuration text the daemon ran before the exec
    failed: str | None = None  # in the image started again with it: why the reload failed
    failed_at: float = 0.0  # ... and when (Unix time)


def hand_over(state: ReloadState, environ: MutableMapping[str, str]) -> bool:
    """Put `state` where the next exec's image finds it (False: this platform has no memfd, so
    a reload that cannot start ends the daemon, as before)."""
    if not hasattr(os, "memfd_create"):
        return False
    fd = os.memfd_create("loghubd-reload", 0)  # no close-on-exec: the exec inherits it
    body = json.dumps(
        {"previous": state.previous, "failed": state.failed, "failed_at": state.failed_at}
    ).encode()
    view = memoryview(body)
    while view:
        view = view[os.write(fd, view) :]
    environ[STATE_FD_ENV] = str(fd)
    return True


def take(environ: MutableMapping[str, str]) -> ReloadState | None:
    """The state a reload handed over (None: this process was not started by a reload). The
    variable is removed and the descriptor closed whatever they held."""
    raw = environ.pop(STATE_FD_ENV, None)
    if raw is None:
        return None
    try:
        fd = int(raw)
        if not os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:loghubd-reload"):
            return None  # not ours (a variable inherited from elsewhere): leave that fd be
    except (ValueError, OSError):
        return None
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        data = json.loads(b"".join(chunks))
        return ReloadState(str(data["previous"]), data["failed"], float(data["failed_at"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None  # unreadable: start as if no reload came before
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
