"""Hook specifications of loghubd (pluggy project and entry-point group `loghubd`).

Hooks handle registration only; the daemon then calls the returned objects directly.
"""

from __future__ import annotations

from collections.abc import Iterable

import pluggy

from loghubd.plugins.api import CliCommand, ProcessorSpec

hookspec = pluggy.HookspecMarker("loghubd")
hookimpl = pluggy.HookimplMarker("loghubd")  # re-exported as `loghubd.hookimpl`


@hookspec
def loghubd_register_processors() -> Iterable[ProcessorSpec]:
    """Return the processors this plugin provides.

    Called once at start-up on every registered plugin (not ``firstresult``: every plugin's
    answer is collected). Each :class:`~loghubd.plugins.api.ProcessorSpec` names a processor
    (``[processor] name = "..."`` selects it) and gives the callable that turns the
    ``[processor.<name>]`` options into a per-daemon factory. Two plugins registering the
    same name is an error at start-up.
    """
    raise NotImplementedError


@hookspec
def loghubd_cli_commands() -> Iterable[CliCommand]:
    """Return the `loghubd` subcommands this plugin adds.

    Called when the command line is parsed, on every registered plugin (not ``firstresult``).
    Each :class:`~loghubd.plugins.api.CliCommand` names a subcommand (``loghubd <name>``), adds
    its arguments and runs it. A name taken by a core command or by another plugin is an
    error. Keep the hook cheap: import what the command needs inside its ``run``.
    """
    raise NotImplementedError
