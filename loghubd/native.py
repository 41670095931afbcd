"""Optional C extensions: imported when they were built, skipped when asked.

loghubd and its plugins ship small C accelerators (`loghubd._fastlog`, `loghubd_spark.
_fastarrow`) that are compiled at install time when a C compiler is there. Each has a pure
Python twin that gives the same results. `LOGHUBD_NO_C=1` in the environment (read when the
using module is imported) makes every one of them run the Python path, for comparison and
for testing that path.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType


def load_extension(name: str) -> ModuleType | None:
    """The extension module `name`, or None if it was not built or LOGHUBD_NO_C is set."""
    if os.environ.get("LOGHUBD_NO_C", "") not in ("", "0"):
        return None
    try:
        return importlib.import_module(name)
    except ImportError:  # built without a C compiler: the Python path
        return None
