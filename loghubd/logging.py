"""structlog configuration: JSON lines by default, a coloured console on a terminal."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, TextIO

import structlog

# Where `configure` sent the logs, and from which level: for `from_signal_handler`.
_target: dict[str, Any] = {}

_SECRET_KEYS = frozenset({"access_key_secret", "secret", "security_token", "status_token"})


def _drop_secrets(
    _logger: object, _name: str, event: structlog.types.EventDict
) -> structlog.types.EventDict:
    for key in _SECRET_KEYS & event.keys():
        event[key] = "***"
    return event


def configure(
    level: str = "info",
    fmt: str = "auto",
    stream: TextIO | None = None,
    *,
    tracebacks: bool = False,
) -> None:
    """Configure structlog and the stdlib root logger once, at process start (cli only).

    Logs go to `stream`: standard output for the daemons (`run`, `serve`: their logs are
    their output), standard error for the tools whose output is data (`status --json`).
    `tracebacks` (`--debug`), or level debug: failure lines carry the traceback
    (`traceback_of`)."""
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
    _target.update(stream=stream, level=numeric, tracebacks=tracebacks or numeric <= logging.DEBUG)


def traceback_of(exc: BaseException) -> dict[str, Any]:
    """Fields for the log line of a failure in a plugin's code (`process`, `initialize`,
    `shutdown`): the traceback (structlog's `exception` field) under `--debug` or log level
    debug, so that a plugin author finds the file and line; nothing otherwise (one line per
    failure, retried ones included, is what an operator reads)."""
    return {"exc_info": exc} if _target.get("tracebacks") else {}


def from_signal_handler(level: str, event: str, **fields: Any) -> None:
    """Log one line from a signal handler, where the configured logger must not be used:
    structlog's PrintLogger writes under a per-stream lock that is not reentrant, and a
    handler that interrupts the main thread inside a log call would wait for it for ever (the
    process hangs, silently, until it is killed). The line goes through the configured
    processors and then straight to the stream's file descriptor in one write(2), past the
    lock and the stream's buffer, after a newline (an empty line at worst). Never raises."""
    try:
        if logging.getLevelName(level.upper()) < _target.get("level", logging.INFO):
            return
        stream: TextIO = _target.get("stream") or sys.stdout
        line: Any = {"event": event, **fields}
        try:
            for processor in structlog.get_config()["processors"]:
                line = processor(None, level, line)
        except Exception:
            line = f"{level} {event} {fields}"
        text = line if isinstance(line, str) else str(line)
        # On a line of its own: the interrupted write may have sent half a line already.
        os.write(stream.fileno(), f"\n{text}\n".encode("utf-8", "replace"))
    except Exception:  # a closed or broken stream must not keep a handler from its work
        pass
