"""The SLS client's own errors, beside the service's typed errors (`loghubd.protocol.errors`).

All are `SlsError`s with a 5xx-like status, so every caller treats them as retryable (a service
that is down), except `CredentialsError`, which describes a bad credentials file or command
output and never holds a secret.
"""

from __future__ import annotations

from typing import Any

from loghubd.protocol import errors as E


class Unreachable(E.SlsError):
    """The service could not be reached within the call's deadline (network errors only)."""

    code = "Unreachable"
    status = 599

    def __init__(
        self, message: str = "", *, cause: str = "", wrong_scheme: bool = False, **answer: Any
    ) -> None:
        super().__init__(message, **answer)
        self.cause = cause  # the last attempt's network error, in words (`network.cause`)
        # https:// to a plain-HTTP service: the endpoint's configuration is wrong, not the
        # network (`network.wrong_scheme`); start-up refuses it instead of waiting for ever.
        self.wrong_scheme = wrong_scheme


class CredentialsUnavailable(E.SlsError):
    """No valid credentials to sign with (none loaded yet, or expired and not refreshed).

    Raised by `get()` before anything is sent. A 5xx-like status makes it retryable: heartbeat,
    pulls and start-up calls back off and try again, as for a service that is down."""

    code = "CredentialsUnavailable"
    status = 599


class CredentialsError(ValueError):
    """A credentials file or command output is unusable; the message never holds a secret."""


class AnswerTooLarge(E.SlsError):
    """A PullLogs answer larger (on the wire or decoded) than the caller's cap: refused before
    it is read in full or decoded, so that an endpoint that is not SLS (a man in the middle,
    a broken proxy) cannot make the daemon allocate without bound. The caller asks for fewer
    log groups (`consumer.fetcher._pull`)."""

    code = "AnswerTooLarge"
    status = 502
