"""The `loghubd` console script (and `python -m loghubd`). Before the command line's modules
are imported (~0.15 s), `loghubd run` starts remembering SIGHUPs (`loghubd._reload_hold`):
a `kill -HUP` or `docker kill -s HUP` in that window used to end the daemon with 129."""

from __future__ import annotations

import sys

# Global options that take a value as the next argument (`loghubd --log-level debug run`).
_VALUED = frozenset({"--log-level", "--log-format"})


def command_of(argv: list[str]) -> str | None:
    """The subcommand `argv` names (the first argument that is not a global option), or None."""
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in _VALUED:
            skip = True
        elif not arg.startswith("-"):
            return arg
    return None


def main() -> int:
    if command_of(sys.argv[1:]) == "run":
        from loghubd import _reload_hold

        _reload_hold.hold()
    from loghubd.cli import main as cli_main

    return cli_main()
