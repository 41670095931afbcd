"""Why a request got no answer, in words an operator acts on: `cause(exc)` for the network
error of the last attempt (aiohttp's own reprs carry a `ConnectionKey(...)` dump and name no
cause). Pure: no I/O."""

from __future__ import annotations

import errno
import ssl

import aiohttp

_BY_ERRNO = {
    errno.ECONNREFUSED: "connection refused: nothing listens there",
    errno.EHOSTUNREACH: "no route to the host",
    errno.ENETUNREACH: "the network is unreachable",
    errno.ECONNRESET: "the connection was reset",
    errno.ETIMEDOUT: "the connection timed out",
}


def cause(exc: BaseException | None) -> str:
    """One phrase: what went wrong with the last attempt."""
    if exc is None:
        return "no attempt finished"
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return f"the TLS certificate was refused: {exc.certificate_error}"
    tls = _tls_problem(exc)
    if tls:
        return tls
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return f"the host name {exc.host} does not resolve"
    if isinstance(exc, aiohttp.ClientConnectorError):
        where = f"{exc.host}:{exc.port}"
        known = _BY_ERRNO.get(exc.os_error.errno or 0)
        return f"{where}: {known or exc.os_error.strerror or exc.os_error}"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the server closed the connection without an answer"
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    if isinstance(exc, OSError) and exc.errno in _BY_ERRNO:
        return _BY_ERRNO[exc.errno]
    return f"{type(exc).__name__}: {exc}"


def hopeless(exc: BaseException) -> bool:
    """Whether another attempt within the same call would surely fail the same way: a TLS
    certificate refused, or a plain-HTTP service behind an https:// URL. The call then fails
    at once instead of retrying until its deadline (the caller's own retries still apply)."""
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return True
    return wrong_scheme(exc)


def wrong_scheme(exc: BaseException | None) -> bool:
    """A plain-HTTP service behind an https:// URL: the endpoint's scheme is wrong, which no
    retry and no change on the service's side will mend."""
    return exc is not None and "WRONG_VERSION_NUMBER" in _tls_problem(exc)


def _tls_problem(exc: BaseException) -> str:
    """A TLS handshake that failed; the plain-http server behind an https:// URL named."""
    inner = exc.os_error if isinstance(exc, aiohttp.ClientConnectorError) else exc
    if not isinstance(inner, ssl.SSLError | aiohttp.ClientSSLError):
        return ""
    reason = getattr(inner, "reason", None) or str(inner)
    if "WRONG_VERSION_NUMBER" in str(reason) or "wrong version number" in str(inner):
        return (
            "the TLS handshake failed (WRONG_VERSION_NUMBER): the service speaks plain HTTP "
            "here; use an http:// endpoint"
        )
    return f"the TLS handshake failed: {reason}"
