"""The `loghubd_cli_commands` hook: plugins add `loghubd` subcommands; the core names none."""

from __future__ import annotations

import argparse

import pytest

from loghubd import CliCommand, hookimpl
from loghubd import cli as cli_mod
from loghubd.plugins.manager import PluginError, Plugins


def _greet_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--who", default="world")


def _greet(args: argparse.Namespace) -> int:
    print(f"hello {args.who}")
    return 3


GREET = CliCommand(name="greet", help="say hello", arguments=_greet_arguments, run=_greet)


class GreetPlugin:
    @hookimpl
    def loghubd_cli_commands(self) -> list[CliCommand]:
        return [GREET]


class ClashingPlugin:
    @hookimpl
    def loghubd_cli_commands(self) -> list[CliCommand]:
        return [CliCommand(name="run", help="", arguments=_greet_arguments, run=_greet)]


def plugins_with(*plugins: object) -> Plugins:
    made = Plugins(load_entry_points=False)
    for plugin in plugins:
        made.pm.register(plugin)
    return made


def test_a_plugin_command_is_parsed_and_run(capsys: pytest.CaptureFixture[str]) -> None:
    commands = plugins_with(GreetPlugin()).cli_commands(taken={"run", "serve"})
    assert commands == [GREET]
    args = cli_mod.build_parser(commands).parse_args(["greet", "--who", "you"])
    assert args.func(args) == 3 and not args.logs_are_output
    assert capsys.readouterr().out == "hello you\n"


def test_a_plugin_cannot_take_a_core_command_or_another_plugins() -> None:
    with pytest.raises(PluginError, match="'run', which is already taken"):
        plugins_with(ClashingPlugin()).cli_commands(taken={"run"})
    with pytest.raises(PluginError, match="'greet', which is already taken"):
        plugins_with(GreetPlugin(), type("Again", (GreetPlugin,), {})()).cli_commands()
    with pytest.raises(PluginError, match="'run', which is already taken"):
        cli_mod.build_parser([CliCommand(name="run", help="", arguments=print, run=_greet)])


@pytest.mark.parametrize(
    ("argv", "word"),
    [
        (["serve", "--port", "1"], "serve"),
        (["--log-level", "debug", "run", "-c", "x"], "run"),
        (["--debug", "spark-stream", "-c", "run"], "spark-stream"),
        (["--help"], None),
        ([], None),
    ],
)
def test_the_command_word_skips_options_and_their_values(argv: list[str], word: str) -> None:
    assert cli_mod._command_word(argv) == word


def test_core_commands_do_not_load_plugins_and_help_lists_theirs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    core = frozenset(cli_mod._core_parser()[1].choices)
    assert "serve" in core and "spark-stream" not in core
    assert cli_mod._plugin_commands(["serve"], core) == []
    # The Spark plugin is installed in the test environment: its command comes by the hook.
    names = [c.name for c in cli_mod._plugin_commands(["--help"], core)]
    assert "spark-stream" in names
    with pytest.raises(SystemExit) as exit_:
        cli_mod.main(["--help"])
    assert exit_.value.code == 0
    assert "spark-stream" in capsys.readouterr().out
