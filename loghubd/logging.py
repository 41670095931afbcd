"""structlog configuration: JSON lines by default, a coloured console on a terminal."""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog

_SECRET_KEYS = frozenset({"access_key_secret", "secret", "security_token", "status_token"})


def _drop_secrets(
    _logger: object, _name: str, event: structlog.types.EventDict
) -> structlog.types.EventDict:
    for key in _SECRET_KEYS & event.keys():
        event[key] = "***"
    return event


def configure(level: str = "info", fmt: str = "auto", stream: TextIO | None = None) -> None:
    """Configure structlog and the stdlib root logger once, at process start (cli only).

    Logs go to `stream`: standard output for the daemons (`run`, `serve`: their logs are
    their output), standard error for the tools whose output is data (`status --json`)."""
    stream = sys.stdout if stream is None else stream
    use_console = fmt == "console" or (fmt == "auto" and stream.isatty())
    renderer: structlog.types.Processor = (
        structlog.dev.ConsoleRenderer() if use_console else structlog.processors.JSONRenderer()
    )
    numeric = logging.getLevelName(level.upper())
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _drop_secrets,
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(stream),
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(level=max(numeric, logging.WARNING), stream=sys.stderr)
