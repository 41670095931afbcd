"""In-process runs of the command line (`cli.main`) keep the test session's logging.

`cli.main` configures structlog for the whole process, with loggers cached on first use on
the stream of that moment: pytest's captured stderr, closed once the test ends. Every later
test on the same worker would then log into a closed file (`ValueError: I/O operation on
closed file`, dozens of unrelated failures). Tests that need the real set-up run the CLI in a
subprocess (tests/integration/test_cli_errors.py)."""

from __future__ import annotations

import pytest

from loghubd import logging as loghubd_logging


@pytest.fixture(autouse=True)
def _keep_the_sessions_logging(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loghubd_logging, "configure", lambda *args, **kwargs: None)
