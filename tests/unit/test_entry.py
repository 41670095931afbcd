"""The console script (`loghubd._entry`) holds SIGHUPs for `loghubd run` before it imports
the command line: `import loghubd` and the hold import nothing heavy, so the window in which a
SIGHUP still ends a starting daemon is the interpreter's own start-up."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import loghubd
from loghubd._entry import command_of


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["run", "-c", "x.toml"], "run"),
        (["--log-level", "debug", "run"], "run"),
        (["--log-level=debug", "--debug", "run"], "run"),
        (["--log-format", "json", "serve", "--port", "1"], "serve"),
        (["status", "-c", "run"], "status"),  # a value named "run" is not the command
        (["--version"], None),
        ([], None),
    ],
)
def test_the_command_is_the_first_argument_that_is_not_a_global_option(
    argv: list[str], command: str | None
) -> None:
    assert command_of(argv) == command


HEAVY = ("aiohttp", "anyio", "structlog", "pluggy", "pyarrow", "loghubd.cli", "loghubd.models")


def test_the_hold_comes_before_any_heavy_import() -> None:
    code = (
        "import json, signal, sys\n"
        "import loghubd._entry, loghubd._reload_hold as h\n"
        "h.hold()\n"
        f"print(json.dumps({{'heavy': [m for m in {HEAVY!r} if m in sys.modules],\n"
        "    'ours': sorted(m for m in sys.modules if m.startswith('loghubd')),\n"
        "    'held': signal.getsignal(signal.SIGHUP) is h._remember}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    said = json.loads(out.stdout)
    assert said == {
        "heavy": [],
        "ours": ["loghubd", "loghubd._entry", "loghubd._lazy", "loghubd._reload_hold"],
        "held": True,
    }, said


def test_a_sighup_held_is_taken_once() -> None:
    code = (
        "import os, signal\n"
        "import loghubd._reload_hold as h\n"
        "h.hold(); os.kill(os.getpid(), signal.SIGHUP)\n"
        "h.hold()  # the daemon's own hold keeps the one remembered\n"
        "print(h.take(), h.take())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.split() == ["True", "False"], out


def test_every_public_name_resolves() -> None:
    for name in loghubd.__all__:
        assert getattr(loghubd, name) is not None, name
