"""Builds the pluggy PluginManager (project `loghubd`) and gives it a typed face.

Built-in processors register through the same hook as external ones; external plugins come
from the `loghubd` entry-point group, loaded one at a time: an entry point that cannot be
imported, implements a hook loghubd does not have (a misspelt name is an error, not
silence), implements none (a hook function without `@hookimpl`) or whose registration hook
fails is set aside as a `BrokenPlugin`, and the others still work. Each command decides what
a broken one means to it (`loghubd plugins` lists it and fails; `run` and `check-config`
warn, and fail only when the configured processor is missing).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import pluggy

import loghubd
from loghubd.plugins import builtin, hookspecs
from loghubd.plugins.api import CliCommand, ProcessorSpec, SinkUnreachable
from loghubd.plugins.loaded import LoadedFactory, ShapeError, load_factory

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

PROJECT = "loghubd"


class PluginError(Exception):
    """A plugin could not be loaded or registers something inconsistent."""


class ProcessorNotCreated(ValueError):
    """A processor's `create` failed with what is neither a refusal of its options
    (ValueError) nor an unreachable sink: a ValueError naming the processor, so that `run` and
    `check-config` report it as a refused configuration (exit 2) and `naming_source` names
    the source it belongs to."""


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a plugin comes from: its distribution and entry point (`builtin`, no target,
    for loghubd's own processors and for plugins a test registers directly)."""

    distribution: str
    version: str
    plugin: str  # the entry point's name
    target: str = ""  # the entry point's value: "loghubd_example", "pkg.mod:attr"

    def __str__(self) -> str:
        where = f'entry point {self.plugin} = "{self.target}"' if self.target else "built in"
        return f"{self.distribution} {self.version} ({where})"


@dataclass(frozen=True, slots=True)
class BrokenPlugin:
    """An entry point set aside: `str()` is the one line a user reads (what, why, the fix);
    `traceback` is what `--debug` prints."""

    origin: Origin
    problem: str  # "cannot be imported: No module named 'x'"
    fix: str  # "fix the entry point"
    traceback: str = ""

    def __str__(self) -> str:
        o = self.origin
        return (
            f'plugin {o.distribution} {o.version}: entry point {o.plugin} = "{o.target}" '
            f"{self.problem} ({self.fix}, or pip uninstall {o.distribution})"
        )


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
        self._loaded: dict[str, Origin] = {}  # plugin name -> its entry point
        self._broken: list[BrokenPlugin] = []
        if load_entry_points:
            self._load_entry_points()
        self.pm.check_pending()
        self._origins: dict[str, Origin] = {}
        self._processors = self._collect()

    @property
    def broken(self) -> tuple[BrokenPlugin, ...]:
        """The entry points that did not load, in the order they were met."""
        return tuple(self._broken)

    def missing_hints(self) -> list[str]:
        """For an error about a processor that is not installed: each entry point that did not
        load, as the likely reason."""
        return [f"maybe it is in a plugin that does not load: {b}" for b in self._broken]

    def print_tracebacks(self) -> None:
        """Why each entry point that did not load failed (`--debug`), on stderr."""
        for broken in self._broken:
            print(broken.traceback or f"{broken}\n", end="", file=sys.stderr)

    def _load_entry_points(self) -> None:
        """Each entry point of the `loghubd` group on its own (pluggy's
        `load_setuptools_entrypoints` stops at the first that fails, losing the rest)."""
        from importlib.metadata import entry_points

        for ep in entry_points(group=PROJECT):
            if self.pm.is_blocked(ep.name):
                continue
            origin = _origin(ep)
            taken = self.pm.get_plugin(ep.name)
            if taken is None:
                self._load(ep, origin)
            elif getattr(taken, "__name__", None) != ep.value:  # loghubd's own `builtin`: same
                first = self._loaded.get(ep.name, Origin("loghubd", loghubd.__version__, ep.name))
                self._set_aside(origin, f"has the name of another plugin's, {first}", "rename it")

    def _load(self, ep: EntryPoint, origin: Origin) -> None:
        try:
            plugin = ep.load()
        except Exception as exc:
            self._set_aside(origin, f"cannot be imported: {why(exc)}", _import_fix(ep, exc), exc)
            return
        try:
            self.pm.register(plugin, name=ep.name)
        except pluggy.PluginValidationError as exc:  # a hook whose arguments are not the spec's
            self._set_aside(origin, f"is refused: {why(exc)}", "fix the plugin", exc)
            return
        except ValueError as exc:  # the only other refusal: this object is registered already
            problem = "names what another entry point has loaded already"
            self._set_aside(origin, problem, "remove one of them", exc)
            return
        unknown = self._unknown_hooks(plugin)
        if unknown:
            self.pm.unregister(plugin)
            self._set_aside(origin, _unknown_hook_problem(unknown), "rename it")
            return
        if not self.pm.get_hookcallers(plugin):  # nothing of it would ever be called
            self.pm.unregister(plugin)
            self._set_aside(origin, *_no_hooks_problem(plugin))
            return
        self._loaded[ep.name] = origin

    def _unknown_hooks(self, plugin: object) -> list[str]:
        """The hooks `plugin` implements that loghubd does not specify (optional ones aside)."""
        return sorted(
            caller.name
            for caller in self.pm.get_hookcallers(plugin) or ()
            if not caller.has_spec()
            and any(i.plugin is plugin and not i.optionalhook for i in caller.get_hookimpls())
        )

    def _set_aside(
        self, origin: Origin, problem: str, fix: str, exc: BaseException | None = None
    ) -> None:
        trace = ""
        if exc is not None:
            import traceback

            trace = "".join(traceback.format_exception(exc))
        self._broken.append(BrokenPlugin(origin, problem, fix, trace))

    def _collect(self) -> dict[str, ProcessorSpec]:
        # Each implementation called on its own (what the hook call does, in its order), so
        # that every processor is known with the plugin and distribution it came from.
        specs: dict[str, ProcessorSpec] = {}
        for impl in reversed(self.pm.hook.loghubd_register_processors.get_hookimpls()):
            origin = self._loaded.get(impl.plugin_name)
            if origin is None:  # registered directly: loghubd's built-ins (or a test's)
                origin = Origin("loghubd", loghubd.__version__, impl.plugin_name)
                registered = list(cast(Iterable[ProcessorSpec], impl.function()))
            else:
                got = self._registered(impl, origin)
                if got is None:
                    continue
                registered = got
            for spec in registered:
                if spec.name in specs:
                    raise PluginError(_clash(spec.name, self._origins[spec.name], origin))
                specs[spec.name] = spec
                self._origins[spec.name] = origin
        return specs

    def _registered(self, impl: pluggy.HookImpl, origin: Origin) -> list[ProcessorSpec] | None:
        """What an entry point's `loghubd_register_processors` returns; None (the plugin set
        aside and unregistered) when it raises."""
        try:
            return list(cast(Iterable[ProcessorSpec], impl.function()))
        except Exception as exc:
            self.pm.unregister(impl.plugin)
            del self._loaded[impl.plugin_name]
            problem = f"fails in loghubd_register_processors: {why(exc)}"
            self._set_aside(origin, problem, "fix the plugin", exc)
            return None

    def describe(self) -> list[ProcessorInfo]:
        """Every processor with its distribution, version and options, by name."""
        out = []
        for name, spec in sorted(self._processors.items()):
            o = self._origins[name]
            out.append(
                ProcessorInfo(
                    name, spec.description, o.distribution, o.version, o.plugin, dict(spec.options)
                )
            )
        return out

    def processors(self) -> dict[str, ProcessorSpec]:
        return dict(self._processors)

    def processor(self, name: str) -> ProcessorSpec:
        try:
            return self._processors[name]
        except KeyError:
            known = ", ".join(sorted(self._processors)) or "none"
            broken = "".join(f"; {hint}" for hint in self.missing_hints())
            raise PluginError(
                f"processor.name: no processor named {name!r} (installed: {known}){broken}"
            ) from None

    def create(self, name: str, options: Mapping[str, Any]) -> LoadedFactory:
        """The factory of processor `name` made from its options, its shape checked once.
        A processor refusing its options raises ValueError ("<key>: why"); one failing
        otherwise (a directory it cannot make) ProcessorNotCreated, a ValueError naming it;
        a factory of the wrong shape is a PluginError naming the processor."""
        spec = self.processor(name)
        try:
            factory = spec.create(options)
        except (ValueError, SinkUnreachable):
            raise
        except Exception as exc:
            raise ProcessorNotCreated(f"processor.{name}: cannot be created: {why(exc)}") from exc
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


def why(exc: BaseException) -> str:
    """`exc` in one line: its message where that reads on its own (an import or OS error names
    the module or the path), else its class too ("KeyError: 'path'", not "'path'")."""
    text = " ".join(str(exc).split())
    if isinstance(exc, ImportError | OSError) and text:
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _origin(ep: EntryPoint) -> Origin:
    dist = ep.dist
    if dist is None:  # an entry point not read from a distribution's metadata
        return Origin("?", "?", ep.name, ep.value)
    return Origin(dist.name, dist.version, ep.name, ep.value)


def _import_fix(ep: EntryPoint, exc: Exception) -> str:
    """What to do about an entry point that does not import: a module or attribute that does
    not exist is the entry point's mistake; another missing module, a dependency."""
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        if ep.module == exc.name or ep.module.startswith(exc.name + "."):
            return "fix the entry point"
        return f"install the module {exc.name!r} it needs"
    if isinstance(exc, AttributeError) and ep.attr:
        return "fix the entry point"
    return "fix the plugin"


def _hook_names() -> list[str]:
    """The hooks loghubd specifies (`loghubd.plugins.hookspecs`)."""
    return sorted(n for n in dir(hookspecs) if n.startswith(f"{PROJECT}_"))


def _unknown_hook_problem(unknown: list[str]) -> str:
    import difflib

    known = _hook_names()
    parts = []
    for name in unknown:
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean {close[0]}?" if close else f"loghubd's hooks: {', '.join(known)}"
        parts.append(f"{name} ({hint})")
    return f"implements an unknown hook: {'; '.join(parts)}"


def _no_hooks_problem(plugin: object) -> tuple[str, str]:
    """Why an entry point that implements no hook is set aside, and the fix: most often a
    hook function that lacks `@hookimpl` (pluggy ignores it without a word)."""
    known = _hook_names()
    bare = [n for n in known if callable(getattr(plugin, n, None))]
    if bare:
        return (
            f"implements no hook: {', '.join(bare)} lacks @hookimpl",
            "decorate it with @loghubd.hookimpl",
        )
    return "implements no loghubd hook", f"implement one of {', '.join(known)}"


def _clash(name: str, first: Origin, second: Origin) -> str:
    """Two plugins register processor `name`: both named, and which one to remove."""
    plugins = [o for o in (first, second) if o.target]  # loghubd's own cannot be uninstalled
    fix = (
        f"pip uninstall {plugins[0].distribution}"
        if len(plugins) == 1
        else "pip uninstall one of them"
    )
    return f"two plugins register a processor named {name!r}: {first} and {second}: {fix}"
