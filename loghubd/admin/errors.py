"""Errors as one line an operator can act on, and the exit codes every command uses.

`explain` turns what a command raised (an SLS error answer, an unreachable service, a port in
use, Ctrl-C, possibly wrapped in exception groups by anyio) into an exit code and a line that
names the thing and the fix. Anything it does not recognise is left to the caller, which
prints a generic line (and the traceback with --debug).

Exit codes (docs/operations.md):

| code | meaning |
|---|---|
| 0 | done |
| 1 | failed: the service refused, or some work failed (a shard, a checkpoint, a batch) |
| 2 | usage or configuration error (a flag, a config key, a URL) |
| 3 | not found: project, logstore, consumer group, shard |
| 4 | cannot reach the service (or, at start, a processor's sink), or a local port is taken |
| 5 | refused for safety: live consumers (use --force), no confirmation (use --yes) |
| 130 | interrupted (Ctrl-C) |
"""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from loghubd.config.redact import redact_text
from loghubd.errors import leaves
from loghubd.protocol import errors as E
from loghubd.proxy import proxy_for
from loghubd.sls import Unreachable
from loghubd.sls.endpoint import client_proxy

OK, FAILED, USAGE, NOT_FOUND, UNREACHABLE, REFUSED, INTERRUPTED = 0, 1, 2, 3, 4, 5, 130


class UserError(Exception):
    """A problem a command reports as one line with an exit code (no traceback)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class Context:
    """What the command was pointed at, to name it in the message."""

    endpoint: str = ""
    project: str = ""
    logstore: str = ""
    group: str = ""
    # Where the command's keys come from, as the fix of a refusal says it
    # (`connect.credentials_origin`); "" is the environment, without -c.
    credentials: str = ""
    # How the fix names the source's keys: `source.logstore`, or `sources.app.logstore` for
    # a `[[sources]]` entry; `flags`: the command also takes --endpoint/--project/--logstore
    # (`loghubd run` does not).
    keys: str = "source"
    flags: bool = True

    def key(self, name: str, form: str = "{flag} ({key})") -> str:
        """Key `name` as the fix names it: `--logstore (source.logstore)`, with `form`."""
        key = f"{self.keys}.{name}"
        return form.format(flag=f"--{name}", key=key) if self.flags else key


ENV_KEYS = "LOGHUBD_SOURCE__ACCESS_KEY_ID and LOGHUBD_SOURCE__ACCESS_KEY_SECRET"
NO_CONFIG_KEYS = f"{ENV_KEYS}, or -c a config whose [source] has them"


def check_endpoint(
    text: str,
    flag: str = "--endpoint",
    environ: Mapping[str, str] | None = None,
    project: str = "",
) -> str:
    """`text` if it is an http(s) URL with a host and the proxy the environment gives for the
    requests of `project` there (`<project>.<host>` on SLS; `loghubd.proxy`) can be used, else
    a UserError saying what is expected."""
    url = text if "://" in text else f"http://{text}"
    shown = redact_text(text)
    try:
        parts = urlsplit(url)
        scheme, netloc, host = parts.scheme, parts.netloc, parts.hostname or ""
        port_ok = parts.port is None or parts.port > 0
    except ValueError:  # a non-numeric port, an unclosed [IPv6 address
        scheme, netloc, host, port_ok = "", "", "", False
    looks_like_host = host == "localhost" or "." in host or ":" in host
    if scheme not in ("http", "https") or not looks_like_host or not port_ok:
        raise UserError(
            USAGE,
            f"{flag} {shown!r} is not a service URL: use http://HOST:PORT for loghubd serve "
            "(e.g. http://127.0.0.1:7100) or https://REGION.log.aliyuncs.com for SLS",
        )
    if "@" in netloc:
        raise UserError(
            USAGE,
            f"{flag} {shown!r} has a user name or password in it, which SLS does not use: "
            f"give the keys as {ENV_KEYS} (or -c a config whose [source] has them) and the "
            "URL without them",
        )
    env = os.environ if environ is None else environ
    try:
        if project:
            client_proxy(url, project, env)
        else:
            proxy_for(url, env)
    except ValueError as exc:
        raise UserError(USAGE, str(exc)) from None
    return text


def refusal(exc: E.SlsError, ctx: Context) -> str:
    """One line for a call the service refused with `exc`: what `explain` says (the thing and
    the fix), then the service's own words and request id where that line lacks them (for a
    log or a support case). `loghubd run` says it of a start-up call that was refused."""
    found = _one(exc, ctx)
    line = found[1] if found is not None else str(exc)
    said = exc.message if exc.error_code in line else f"{exc.error_code}: {exc.message}"
    extra = [said] if exc.message and exc.message not in line else []
    if exc.request_id and exc.request_id not in line:
        extra.append(f"request {exc.request_id}")
    return f"{line} ({'; '.join(extra)})" if extra else line


def explain(exc: BaseException, ctx: Context) -> tuple[int, str] | None:
    """(exit code, one line) for a known failure, or None."""
    found = [r for r in (_one(e, ctx) for e in leaves(exc)) if r is not None]
    if not found:
        return None
    return min(found, key=lambda r: _RANK.get(r[0], 9))


_RANK = {INTERRUPTED: 0, USAGE: 1, UNREACHABLE: 2, NOT_FOUND: 3, REFUSED: 4, FAILED: 5}


def _one(exc: BaseException, ctx: Context) -> tuple[int, str] | None:
    where = ctx.endpoint or "the service"
    if isinstance(exc, KeyboardInterrupt):
        return INTERRUPTED, "interrupted"
    if isinstance(exc, UserError):
        return exc.code, exc.message
    if isinstance(exc, E.ProjectNotExist):
        return NOT_FOUND, (
            f"project {ctx.project!r} does not exist at {where}: check {ctx.key('project')}"
        )
    if isinstance(exc, E.LogStoreNotExist):
        return NOT_FOUND, (
            f"logstore {ctx.logstore!r} does not exist in project {ctx.project!r}: check "
            f"{ctx.key('logstore')}"
        )
    if isinstance(exc, E.ConsumerGroupNotExist):
        return NOT_FOUND, (
            f"consumer group {ctx.group!r} does not exist on {ctx.project}/{ctx.logstore}: "
            f"`loghubd group list` shows the groups there"
        )
    if isinstance(exc, E.ShardNotExist):
        return NOT_FOUND, f"{exc.message}: `loghubd group describe` lists the shards"
    if isinstance(exc, E.InvalidCursor):
        return USAGE, f"the service refused the cursor: {exc.message}"
    if isinstance(exc, Unreachable) and exc.wrong_scheme:
        # Not the service being down: the URL is wrong, which waiting will not mend (as `run`).
        return USAGE, f"{where}: {exc.cause} ({ctx.key('endpoint', '{flag}, {key}')})"
    if isinstance(exc, Unreachable):
        why = f" ({exc.cause})" if exc.cause else ""
        return UNREACHABLE, (
            f"cannot reach {where}{why}: is the service running and the URL right? "
            f"({ctx.key('endpoint', '{flag}, {key}')})"
        )
    keys = ctx.credentials or NO_CONFIG_KEYS
    if isinstance(exc, E.Unauthorized):
        # Also a permission denial (RAM policy; serve's --access-keys policies): the keys
        # were accepted, and only the service's message says which action was refused.
        return FAILED, (
            f"{where} refused the request (Unauthorized): {exc.message or 'no reason given'}; "
            f"use keys allowed to do it: {keys}"
        )
    if isinstance(
        exc, E.SignatureNotMatch | E.InvalidAccessKeyId | E.SecurityTokenExpired | E.MissAccessKeyId
    ):
        return FAILED, f"{where} refused the credentials ({exc.error_code}): check {keys}"
    from loghubd.sls import CredentialsError, CredentialsUnavailable

    if isinstance(exc, CredentialsUnavailable | CredentialsError):
        return FAILED, f"no credentials to sign with: {exc}"
    if isinstance(exc, E.SlsError):
        return FAILED, f"{where} answered {exc}"
    if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
        return UNREACHABLE, f"address already in use: {exc.strerror}"
    return None
