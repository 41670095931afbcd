"""`loghubd.rollback`: what a reload's exec hands the fresh image (the configuration that ran),
and that a variable it did not set is ignored without touching any descriptor."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from loghubd import rollback
from loghubd.rollback import STATE_FD_ENV, ReloadState


@pytest.mark.parametrize(
    "state",
    [
        ReloadState('[source]\nlogstore = "app"  # ü, "quotes", \\ and a secret = "s3cr3t"\n'),
        ReloadState("", failed="cannot start: logstore apq does not exist", failed_at=1.5),
        ReloadState("x" * 300_000),  # larger than one read and than an env var may be
    ],
)
def test_a_handed_over_state_is_taken_back_once_and_its_descriptor_closed(
    state: ReloadState,
) -> None:
    environ: dict[str, str] = {}
    assert rollback.hand_over(state, environ)
    fd = int(environ[STATE_FD_ENV])
    assert os.get_inheritable(fd)  # the exec keeps it
    assert rollback.take(environ) == state
    assert STATE_FD_ENV not in environ  # nothing started later inherits it
    with pytest.raises(OSError, match="Bad file descriptor"):
        os.fstat(fd)
    assert rollback.take(environ) is None


@pytest.mark.parametrize("value", ["", "x", "-1", "99999"])
def test_a_variable_that_names_no_descriptor_is_dropped(value: str) -> None:
    environ = {STATE_FD_ENV: value}
    assert rollback.take(environ) is None
    assert environ == {}


def test_a_descriptor_that_is_not_ours_is_left_open(tmp_path: Path) -> None:
    with open(tmp_path / "other", "w") as other:
        environ = {STATE_FD_ENV: str(other.fileno())}
        assert rollback.take(environ) is None
        os.fstat(other.fileno())  # still open: another file's descriptor is not closed
