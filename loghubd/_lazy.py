"""Names a package re-exports, imported from their modules on first use (a module-level
`__getattr__`, PEP 562): `loghubd` and `loghubd.sls` re-export the SLS client without making
every `import loghubd` pay for aiohttp."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(package: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """The `__getattr__` of `package` for `names` (name -> the module that defines it, or
    re-exports it lazily in turn). A resolved name is cached in the package's namespace."""

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        sys.modules[package].__dict__[name] = value
        return value

    return __getattr__
