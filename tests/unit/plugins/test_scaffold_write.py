"""`loghubd new-plugin` writing its package (`scaffold.write`): a directory that cannot be
made is one line naming it and why, with the usage exit code, never a traceback; the files
are written whole, or nothing is left to stand in the way of running it again."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import pytest

from loghubd.admin.errors import FAILED, USAGE, UserError
from loghubd.plugins import scaffold
from loghubd.processors.options import ConfigError

Immutable = Callable[[Path], None]  # the `immutable` fixture (tests/conftest.py)


def under_a_file(tmp: Path, immutable: Immutable) -> Path:
    (tmp / "file").write_text("")
    return tmp / "file" / "x"


def deep_under_a_file(tmp: Path, immutable: Immutable) -> Path:
    (tmp / "file").write_text("")
    return tmp / "file" / "x" / "y"


def existing_directory(tmp: Path, immutable: Immutable) -> Path:
    (tmp / "x").mkdir()
    return tmp / "x"


def existing_file(tmp: Path, immutable: Immutable) -> Path:
    (tmp / "x").write_text("")
    return tmp / "x"


def in_a_directory_that_takes_no_new_names(tmp: Path, immutable: Immutable) -> Path:
    (tmp / "locked").mkdir()
    immutable(tmp / "locked")
    return tmp / "locked" / "x"


@pytest.mark.parametrize(
    ("where", "code", "message"),
    [
        (under_a_file, USAGE, "{tmp}/file/x cannot be made: {tmp}/file is not a directory"),
        (deep_under_a_file, USAGE, "{tmp}/file/x/y cannot be made: {tmp}/file is not a directory"),
        (existing_directory, USAGE, "{tmp}/x already exists"),
        (existing_file, USAGE, "{tmp}/x already exists"),
        (
            in_a_directory_that_takes_no_new_names,
            USAGE,
            "{tmp}/locked/x cannot be made: Operation not permitted (EPERM); pick another --dir",
        ),
    ],
)
def test_a_directory_that_cannot_be_made_is_one_line_and_exit_2(
    tmp_path: Path,
    immutable: Immutable,
    where: Callable[[Path, Immutable], Path],
    code: int,
    message: str,
) -> None:
    root = where(tmp_path, immutable)
    with pytest.raises(UserError) as raised:
        scaffold.write(root, scaffold.files("loghubd-audit"))
    assert (raised.value.code, raised.value.message) == (code, message.format(tmp=tmp_path))


def test_a_file_that_cannot_be_written_leaves_nothing_behind(tmp_path: Path) -> None:
    root = tmp_path / "pkg"
    with pytest.raises(UserError) as raised:  # "a" is a file: "a/b" cannot be made under it
        scaffold.write(root, {"a": "text", "a/b": "text"})
    assert raised.value.code == FAILED
    assert raised.value.message == f"cannot write {root}/a/b: File exists (EEXIST)"
    assert not root.exists()  # so that running it again is not refused as "already exists"


def test_the_package_is_written(tmp_path: Path) -> None:
    made = scaffold.files("loghubd-audit")
    scaffold.write(tmp_path / "new" / "loghubd-audit", made)
    for relative, text in made.items():
        assert (tmp_path / "new" / "loghubd-audit" / relative).read_text() == text


def test_the_generated_factory_reports_every_bad_option_at_once(tmp_path: Path) -> None:
    """The package checks its table as docs/plugins.md says (`loghubd.processors.options`):
    every unknown key (with "did you mean"), wrong type and missing value in one ConfigError."""
    made = scaffold.files("loghubd-audit")
    scaffold.write(tmp_path / "pkg", made)
    where = tmp_path / "pkg" / "loghubd_audit" / "__init__.py"
    spec = importlib.util.spec_from_file_location("scaffold_generated_audit", where)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(ConfigError) as refused:
        module.Factory({"pth": "/tmp/x", "colour": "red"})
    assert refused.value.problems == (
        "processor.audit.pth: unknown key (did you mean processor.audit.path?)",
        "processor.audit.colour: unknown key",
        "processor.audit.path: required",
    )
    with pytest.raises(ConfigError, match=r"^processor\.audit\.path: expected a string, got "):
        module.Factory({"path": 5})
    assert module.Factory({"path": str(tmp_path)}).directory == tmp_path
