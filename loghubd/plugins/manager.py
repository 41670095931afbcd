"""Builds the pluggy PluginManager (project `loghubd`) and gives it a typed face.

Built-in processors register through the same hook as external ones; external plugins come
from the `loghubd` entry-point group. `check_pending()` refuses hook implementations that
match no spec (a misspelt hook name is an error, not silence).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pluggy

from loghubd.plugins import builtin, hookspecs
from loghubd.plugins.api import ProcessorSpec
from loghubd.plugins.loaded import LoadedFactory, ShapeError, load_factory

PROJECT = "loghubd"


class PluginError(Exception):
    """A plugin could not be loaded or registers something inconsistent."""


class Plugins:
    """The daemon's plugins: one PluginManager, built once in the composition root."""

    def __init__(self, *, load_entry_points: bool = True, blocked: Iterable[str] = ()) -> None:
        self.pm = pluggy.PluginManager(PROJECT)
        self.pm.add_hookspecs(hookspecs)
        for name in blocked:
            self.pm.set_blocked(name)
        self.pm.register(builtin, name="builtin")
        if load_entry_points:
            try:
                self.pm.load_setuptools_entrypoints(PROJECT)
            except Exception as exc:
                raise PluginError(f"loading a loghubd plugin failed: {exc!r}") from exc
        self.pm.check_pending()
        self._processors = self._collect()

    def _collect(self) -> dict[str, ProcessorSpec]:
        specs: dict[str, ProcessorSpec] = {}
        for result in self.pm.hook.loghubd_register_processors():
            for spec in result:
                if spec.name in specs:
                    raise PluginError(f"two plugins register a processor named {spec.name!r}")
                specs[spec.name] = spec
        return specs

    def processors(self) -> dict[str, ProcessorSpec]:
        return dict(self._processors)

    def processor(self, name: str) -> ProcessorSpec:
        try:
            return self._processors[name]
        except KeyError:
            known = ", ".join(sorted(self._processors)) or "none"
            raise PluginError(
                f"processor.name: no processor named {name!r} (installed: {known})"
            ) from None

    def create(self, name: str, options: Mapping[str, Any]) -> LoadedFactory:
        """The factory of processor `name` made from its options, its shape checked once.
        A processor refusing its options raises ValueError ("<key>: why"); a factory of the
        wrong shape is a PluginError naming the processor."""
        factory = self.processor(name).create(options)
        try:
            return load_factory(name, factory)
        except ShapeError as exc:
            raise PluginError(str(exc)) from exc
