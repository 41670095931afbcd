"""Builds the pluggy PluginManager (project `loghubd`) and gives it a typed face.

Built-in processors register through the same hook as external ones; external plugins come
from the `loghubd` entry-point group. `check_pending()` refuses hook implementations that
match no spec (a misspelt hook name is an error, not silence).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import pluggy

import loghubd
from loghubd.plugins import builtin, hookspecs
from loghubd.plugins.api import CliCommand, ProcessorSpec
from loghubd.plugins.loaded import LoadedFactory, ShapeError, load_factory

PROJECT = "loghubd"


class PluginError(Exception):
    """A plugin could not be loaded or registers something inconsistent."""


@dataclass(frozen=True, slots=True)
class ProcessorInfo:
    """A processor as `loghubd plugins` lists it: where it comes from and its options."""

    name: str
    description: str
    distribution: str
    version: str
    plugin: str  # the entry point's name (`builtin` for loghubd's own)
    options: Mapping[str, str]


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
        self._origins: dict[str, tuple[str, str, str]] = {}
        self._processors = self._collect()

    def _collect(self) -> dict[str, ProcessorSpec]:
        # Each implementation called on its own (what the hook call does, in its order), so
        # that every processor is known with the plugin and distribution it came from.
        dists = {id(plugin): dist for plugin, dist in self.pm.list_plugin_distinfo()}
        specs: dict[str, ProcessorSpec] = {}
        for impl in reversed(self.pm.hook.loghubd_register_processors.get_hookimpls()):
            dist = dists.get(id(impl.plugin))
            if dist is None:  # registered directly: loghubd's built-ins (or a test's)
                origin = ("loghubd", loghubd.__version__, impl.plugin_name)
            else:
                origin = (dist.metadata["Name"], dist.version, impl.plugin_name)
            for spec in cast(Iterable[ProcessorSpec], impl.function()):
                if spec.name in specs:
                    raise PluginError(f"two plugins register a processor named {spec.name!r}")
                specs[spec.name] = spec
                self._origins[spec.name] = origin
        return specs

    def describe(self) -> list[ProcessorInfo]:
        """Every processor with its distribution, version and options, by name."""
        out = []
        for name, spec in sorted(self._processors.items()):
            dist, version, plugin = self._origins[name]
            out.append(
                ProcessorInfo(name, spec.description, dist, version, plugin, dict(spec.options))
            )
        return out

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

    def cli_commands(self, taken: Iterable[str] = ()) -> list[CliCommand]:
        """The subcommands plugins add (`loghubd_cli_commands`), by name; a name in `taken`
        (the core's commands) or added twice is a PluginError."""
        names = set(taken)
        commands = []
        for result in self.pm.hook.loghubd_cli_commands():
            for command in cast(Iterable[CliCommand], result):
                if command.name in names:
                    raise PluginError(
                        f"a plugin adds the command {command.name!r}, which is already taken"
                    )
                names.add(command.name)
                commands.append(command)
        return sorted(commands, key=lambda c: c.name)
