"""Every `--help` shows the defaults: each option that has one (not None, not an off flag)
says it, for every command and subcommand (issue #18)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from loghubd import cli


def parsers(
    parser: argparse.ArgumentParser, name: str = "loghubd"
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from parsers(sub, f"{name} {sub_name}")


def test_every_option_with_a_default_shows_it() -> None:
    missing = []
    checked = 0
    for name, parser in parsers(cli.build_parser()):
        text = parser.format_help()
        text = text[text.index("options:") :]  # not the usage line
        for action in parser._actions:
            if (
                action.default in (None, False, "", [], argparse.SUPPRESS)
                or not action.option_strings
            ):
                continue
            if isinstance(action, argparse._HelpAction | argparse._VersionAction):
                continue
            checked += 1
            flag = action.option_strings[-1]
            block = text[text.index(f"  {action.option_strings[0]}") :].split("\n  -")[0]
            if "default" not in block:
                missing.append(f"{name} {flag}")
    assert checked > 20
    assert not missing, missing


def test_version_flag() -> None:
    from loghubd import __version__

    version = [a for a in cli.build_parser()._actions if isinstance(a, argparse._VersionAction)]
    assert version and version[0].version == f"loghubd {__version__}"
