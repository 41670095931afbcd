"""`loghubd run` starts with the cyclic garbage collector off and freezes what start-up made;
whatever happens during start-up, the collector is on again afterwards."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from loghubd import cli, commands
from loghubd import logging as loghubd_logging


@pytest.fixture
def collector() -> Iterator[None]:
    """Leave the interpreter's collector as the test found it."""
    was_enabled = gc.isenabled()
    yield
    gc.unfreeze()
    if was_enabled:
        gc.enable()
    else:
        gc.disable()


def test_the_collector_is_off_during_start_up_and_frozen_objects_stay_out_of_it(
    collector: None,
) -> None:
    gc.unfreeze()
    gc.enable()
    with commands.startup():
        assert not gc.isenabled()
        made_at_start_up = [[i] for i in range(1000)]
    assert gc.isenabled()
    assert gc.get_freeze_count() >= len(made_at_start_up)
    # frozen: in no generation the collector traverses
    assert not any(o is made_at_start_up for o in gc.get_objects())


def test_a_start_up_that_fails_leaves_the_collector_on(collector: None) -> None:
    gc.enable()
    with pytest.raises(RuntimeError), commands.startup():
        raise RuntimeError("bad plugin")
    assert gc.isenabled()


def test_bad_configuration_exits_2_with_the_collector_on(
    collector: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[consumer]\nno_such_key = 1\n")
    gc.enable()
    # cmd_run, not main(): main() would point structlog at this test's captured stderr
    assert commands.cmd_run(cli.build_parser().parse_args(["run", "-c", str(cfg)])) == 2
    assert gc.isenabled()
    assert "no_such_key" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("environ", "platform", "expected"),
    [
        ({}, "linux", "jemalloc"),
        ({"ARROW_DEFAULT_MEMORY_POOL": "mimalloc"}, "linux", "mimalloc"),
        ({"ARROW_DEFAULT_MEMORY_POOL": "system"}, "linux", "system"),
        ({}, "darwin", None),
        ({}, "win32", None),
    ],
)
def test_arrow_gets_jemalloc_on_linux_unless_the_operator_chose(
    environ: dict[str, str], platform: str, expected: str | None
) -> None:
    env = dict(environ)
    cli.prefer_jemalloc(env, platform)
    assert env.get("ARROW_DEFAULT_MEMORY_POOL") == expected


def test_the_command_line_allocates_arrow_memory_with_jemalloc() -> None:
    """`main()` sets the pool before anything imports pyarrow, and pyarrow uses it. A fresh
    interpreter, because this one has imported pyarrow already; `--version` runs `main()`'s
    start and exits."""
    import subprocess
    import sys

    code = (
        "import os, sys\n"
        "os.environ.pop('ARROW_DEFAULT_MEMORY_POOL', None)\n"
        "from loghubd import cli\n"
        "try:\n"
        "    cli.main(['--version'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "assert 'pyarrow' not in sys.modules, 'the command line imported pyarrow'\n"
        "import pyarrow as pa\n"
        "print(pa.default_memory_pool().backend_name)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip().splitlines()[-1] == "jemalloc", out.stderr


def test_debug_gives_every_commands_failure_lines_their_traceback(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`loghubd --debug serve`: serve's `request_failed` lines carry the traceback, as its
    docs say (only `run`, which sets up its logging again, passed `--debug` on before)."""
    asked: list[object] = []
    monkeypatch.setattr(
        loghubd_logging, "configure", lambda *a, **k: asked.append(k.get("tracebacks"))
    )
    serve = ["serve", "--data-dir", str(tmp_path), "--max-connections-per-address", "-1"]
    assert cli.main(["--debug", *serve]) == 2  # refused after logging is set up
    assert cli.main(serve) == 2
    assert asked == [True, False]
    assert "--max-connections-per-address" in capsys.readouterr().err
