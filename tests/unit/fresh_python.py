"""A fresh interpreter for the tests of which path a C extension takes: `LOGHUBD_NO_C` is read
once, when the using module is imported, so each choice needs its own process."""

from __future__ import annotations

import os
import subprocess
import sys


def fresh_python(code: str, **env: str) -> str:
    """What `python -c code` prints (stripped), with this environment minus LOGHUBD_NO_C, plus
    `env`; a failure raises CalledProcessError with its stderr."""
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**{k: v for k, v in os.environ.items() if k != "LOGHUBD_NO_C"}, **env},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
