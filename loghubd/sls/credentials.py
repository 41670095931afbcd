"""Daemon credentials: where the keys that sign a source's requests come from, kept fresh.

One provider per source, built by `provider_for(source)` from `source.credentials`:

- "static" and "env": `StaticCredentials`, the `[source]` keys, or the
  `ALIBABA_CLOUD_ACCESS_KEY_ID` / `_SECRET` / `ALIBABA_CLOUD_SECURITY_TOKEN` values the
  config loader read from its environ (code below `app.py` never reads `os.environ`).
- "file": `FileCredentials`, a JSON file re-read when its mtime, size or inode changes
  (checked once a second) and after an auth error.
- "command": `CommandCredentials`, a command (argv, no shell) whose stdout is the JSON,
  run again before the credentials expire and after an auth error.

Every provider has a sync `get()` that the client calls for each request: a read of the
cache, no I/O; it raises `CredentialsUnavailable` (a retryable `SlsError`, so callers back
off as for an unreachable service) when there are no valid credentials. `invalidate(used)`
is what the client calls on an auth error (the SDK's `credentials_refresher`): an immediate
reload, at most one per `INVALIDATE_GAP_S`, unless `used` (the refused credentials) were
already replaced. `problem` says why `get()` fails, for readiness;
`describe()` is the `/status` view. `run_refresh` is the provider's own task, started by the
source in its task group: it reports started after the first load attempt, so the first
request already has the credentials, and never raises on a bad file or a failing command
(it logs, keeps the credentials it has while they are valid, and tries again).

JSON shapes (file and command stdout), an object with either
- the STS AssumeRole `Credentials` keys: `AccessKeyId`, `AccessKeySecret`, `SecurityToken`
  (optional), `Expiration` (optional); the whole AssumeRole answer (`{"Credentials": {...}}`,
  what `aliyun sts AssumeRole` prints) is accepted too; or
- the aliyun CLI profile keys: `access_key_id`, `access_key_secret`, `sts_token` or
  `security_token` (optional), `expiration` (optional).
`Expiration` is an ISO-8601 time with a zone (`2024-05-01T00:00:00Z`) or unix seconds; without
it the credentials never expire (a command is then run again only after an auth error).
Other keys are ignored.

Refresh timing (command): at the earlier of `REFRESH_MARGIN_S` (5 minutes) before the
expiration and `REFRESH_FRACTION` (80 %) of the lifetime left when they were fetched; when
less than 5 minutes were left, at 80 % alone. Never sooner than `MIN_REFRESH_GAP_S` after the
previous run. A failed run is retried with exponential backoff (`backoff`) while the old
credentials are used for as long as they are valid.

Secrets are never logged nor put in messages: log events carry the provider, the access key
id and the expiration only, and a bad file is described without its content.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import subprocess
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import anyio
import structlog
from anyio.abc import TaskStatus

from loghubd.backoff import Backoff
from loghubd.config import SourceConfig
from loghubd.config.redact import redact_text
from loghubd.protocol.signing import Credentials
from loghubd.sls.errors import CredentialsError, CredentialsUnavailable

log = structlog.get_logger("loghubd.credentials")

REFRESH_MARGIN_S = 300.0
REFRESH_FRACTION = 0.8
MIN_REFRESH_GAP_S = 1.0
INVALIDATE_GAP_S = 2.0  # auth errors come in bursts (every shard at once): one reload each
FILE_CHECK_INTERVAL_S = 1.0
BACKOFF_INITIAL_S = 1.0
BACKOFF_MAX_S = 30.0
COMMAND_BACKOFF = Backoff(initial=BACKOFF_INITIAL_S, cap=BACKOFF_MAX_S)
STDERR_SHOWN = 300  # characters of a failed command's stderr in the log

Clock = Callable[[], float]  # wall clock, unix seconds (expirations are wall-clock times)
# (argv, timeout) → stdout; raises CredentialsError when the command fails.
CommandRunner = Callable[[Sequence[str], float], Awaitable[bytes]]


@dataclass(frozen=True, slots=True)
class Issued:
    """Credentials as a file or command gave them. `expiration`: unix seconds, or None."""

    credentials: Credentials
    expiration: float | None = None


# (id, secret, token keys, expiration) of each accepted JSON shape, tried in this order.
_SHAPES = (
    ("AccessKeyId", "AccessKeySecret", ("SecurityToken",), "Expiration"),
    ("access_key_id", "access_key_secret", ("sts_token", "security_token"), "expiration"),
)


def parse(text: str | bytes) -> Issued:
    """Credentials from JSON in one of the accepted shapes (see the module docstring)."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        # The decoder's message names a position, never the content.
        raise CredentialsError(f"not JSON ({getattr(exc, 'msg', 'undecodable')})") from None
    if not isinstance(data, dict):
        raise CredentialsError("expected a JSON object")
    if isinstance(data.get("Credentials"), dict):  # a whole AssumeRole answer
        data = data["Credentials"]
    for id_key, secret_key, token_keys, expiry_key in _SHAPES:
        if id_key not in data:
            continue
        key_id, secret = data.get(id_key), data.get(secret_key)
        if not isinstance(key_id, str) or not key_id:
            raise CredentialsError(f"{id_key}: expected a non-empty string")
        if not isinstance(secret, str) or not secret:
            raise CredentialsError(f"{secret_key}: expected a non-empty string")
        token = next((data[k] for k in token_keys if data.get(k) is not None), "")
        if not isinstance(token, str):
            raise CredentialsError(f"{'/'.join(token_keys)}: expected a string")
        expiration = _expiration(data.get(expiry_key), expiry_key)
        return Issued(Credentials(key_id, secret, token), expiration)
    raise CredentialsError(
        "expected AccessKeyId, AccessKeySecret[, SecurityToken, Expiration] (STS) or "
        "access_key_id, access_key_secret[, sts_token, expiration] (aliyun CLI)"
    )


def _expiration(value: object, key: str) -> float | None:
    if value is None or value == "":
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        if not math.isfinite(value) or value <= 0:
            raise CredentialsError(f"{key}: expected unix seconds > 0")
        return float(value)
    if isinstance(value, str):
        try:
            when = datetime.fromisoformat(value.strip())
        except ValueError:
            when = None
        if when is not None and when.tzinfo is not None:
            return when.timestamp()
    raise CredentialsError(
        f"{key}: expected an ISO-8601 time with a zone (e.g. 2024-05-01T00:00:00Z) or unix "
        f"seconds, got {value!r}"
    )


def refresh_at(fetched_at: float, expiration: float) -> float:
    """When credentials fetched at `fetched_at` and expiring at `expiration` are refreshed."""
    at_fraction = fetched_at + REFRESH_FRACTION * (expiration - fetched_at)
    at_margin = expiration - REFRESH_MARGIN_S
    return at_margin if fetched_at < at_margin < at_fraction else at_fraction


def backoff(failures: int) -> float:
    """Wait after `failures` (>= 1) failed runs in a row: 1, 2, 4 … 30 s."""
    return COMMAND_BACKOFF.wait(failures)


def iso(when: float | None) -> str | None:
    return None if when is None else datetime.fromtimestamp(when, UTC).isoformat()


class CredentialsProvider(Protocol):
    """What a source signs with; see the module docstring."""

    kind: str

    def get(self) -> Credentials: ...

    def invalidate(self, used: Credentials | None = None) -> None: ...

    @property
    def problem(self) -> str: ...

    def describe(self) -> dict[str, Any]: ...

    async def run_refresh(self, *, task_status: TaskStatus[None] = ...) -> None: ...


class StaticCredentials:
    """Fixed keys (`credentials = "static"` or `"env"`): nothing to refresh."""

    def __init__(self, credentials: Credentials, kind: str = "static") -> None:
        self.kind = kind
        self._credentials = credentials

    def get(self) -> Credentials:
        return self._credentials

    def invalidate(self, used: Credentials | None = None) -> None:
        pass  # nothing would change

    @property
    def problem(self) -> str:
        return ""

    def describe(self) -> dict[str, Any]:
        return {"provider": self.kind, "access_key_id": self._credentials.access_key_id}

    async def run_refresh(
        self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        task_status.started()


class _Reloading:
    """The cache and loop shared by the file and command providers: `_attempt()` loads (or
    checks), `_next_attempt(now)` says when to call it again (wall clock; inf: only after an
    invalidation)."""

    kind = ""

    def __init__(self, where: str, clock: Clock) -> None:
        self.where = where  # for messages: the file's path or the command's name
        self._clock = clock
        self._issued: Issued | None = None
        self._fetched_at = -math.inf  # when `_issued` was loaded
        self._attempted_at = -math.inf  # the last load, successful or not
        self._error = ""  # why the last load failed ("" if it worked)
        self._stale = False  # invalidated: reload as soon as INVALIDATE_GAP_S allows
        self._expiry_logged: float | None = None
        self._wake: anyio.Event | None = None

    def get(self) -> Credentials:
        issued = self._issued
        if issued is None:
            raise CredentialsUnavailable(
                f"no credentials from {self.where} yet: {self._error or 'not loaded yet'}"
            )
        if issued.expiration is not None and self._clock() >= issued.expiration:
            why = f"refreshing failed: {self._error}" if self._error else "no fresh ones yet"
            raise CredentialsUnavailable(
                f"the credentials from {self.where} ({issued.credentials.access_key_id}) "
                f"expired at {iso(issued.expiration)}; {why}"
            )
        return issued.credentials

    def invalidate(self, used: Credentials | None = None) -> None:
        """Reload soon: `used` were refused. Ignored when they are not the current ones any
        more (a request signed before the last reload, answered after it)."""
        issued = self._issued
        if used is not None and issued is not None and used != issued.credentials:
            return
        if not self._stale:
            log.info("credentials_invalidated", provider=self.kind, origin=self.where)
        self._stale = True
        if self._wake is not None:
            self._wake.set()

    @property
    def problem(self) -> str:
        try:
            self.get()
        except CredentialsUnavailable as exc:
            return exc.message
        return ""

    def describe(self) -> dict[str, Any]:
        issued = self._issued
        return {
            "provider": self.kind,
            "from": self.where,
            "access_key_id": issued.credentials.access_key_id if issued else None,
            "expiration": iso(issued.expiration) if issued else None,
            "loaded_at": iso(self._fetched_at) if issued else None,
            "problem": self.problem,
            "last_error": self._error,
        }

    async def run_refresh(
        self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        await self._attempt()
        task_status.started()
        while True:
            # A new event each round: an invalidation sets `_stale` first, so one that
            # lands between two rounds is seen by `_next_attempt` all the same.
            self._wake = anyio.Event()
            self._note_expiry()
            now = self._clock()
            delay = self._next_attempt(now) - now
            expiration = self._issued.expiration if self._issued else None
            if expiration is not None and now < expiration:
                delay = min(delay, expiration - now)  # to log the expiry when it happens
            if delay > 0:
                with anyio.move_on_after(delay):
                    await self._wake.wait()
                continue  # woken or due: decide again
            await self._attempt()

    def _next_attempt(self, now: float) -> float:
        raise NotImplementedError

    async def _attempt(self) -> None:
        raise NotImplementedError

    def _invalidation_due(self) -> float:
        return self._attempted_at + INVALIDATE_GAP_S

    def _loaded(self, issued: Issued, **fields: Any) -> None:
        old = self._issued
        changed = old is None or old.credentials != issued.credentials
        self._issued, self._fetched_at, self._error = issued, self._clock(), ""
        self._expiry_logged = None
        if changed:  # an invalidation during the load was about the old ones
            self._stale = False
        log.info(
            "credentials_loaded",
            provider=self.kind,
            origin=self.where,
            access_key_id=issued.credentials.access_key_id,
            expiration=iso(issued.expiration),
            changed=changed,
            **fields,
        )

    def _failed(self, error: str, **fields: Any) -> None:
        issued = self._issued
        valid = issued is not None and (
            issued.expiration is None or self._clock() < issued.expiration
        )
        log.warning(
            "credentials_load_failed",
            provider=self.kind,
            origin=self.where,
            error=error,
            keeping=issued.credentials.access_key_id if issued and valid else None,
            valid_until=iso(issued.expiration) if issued and valid else None,
            **fields,
        )
        self._error = error

    def _note_expiry(self) -> None:
        issued = self._issued
        if issued is None or issued.expiration is None:
            return
        if self._clock() >= issued.expiration and self._expiry_logged != issued.expiration:
            self._expiry_logged = issued.expiration
            log.error(
                "credentials_expired",
                provider=self.kind,
                origin=self.where,
                access_key_id=issued.credentials.access_key_id,
                expiration=iso(issued.expiration),
                error=self._error,
            )


def _signature(path: Path) -> tuple[int, int, int]:
    st = os.stat(path)  # follows symlinks: a swapped Kubernetes secret shows as a new inode
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class FileCredentials(_Reloading):
    """`credentials = "file"`: the JSON file at `path`, re-read when it changes."""

    kind = "file"

    def __init__(
        self, path: Path, clock: Clock = time.time, check_interval: float = FILE_CHECK_INTERVAL_S
    ) -> None:
        super().__init__(f"file {path}", clock)
        self.path = path
        self.check_interval = check_interval
        self._checked_at = -math.inf
        self._seen: tuple[int, int, int] | None = None  # what the loaded content had

    def _next_attempt(self, now: float) -> float:
        due = self._checked_at + self.check_interval
        return min(due, self._invalidation_due()) if self._stale else due

    async def _attempt(self) -> None:
        self._checked_at = self._clock()
        forced = self._stale and self._clock() >= self._invalidation_due()
        try:
            seen = await anyio.to_thread.run_sync(_signature, self.path)
            if seen == self._seen and not forced:
                return
            self._attempted_at, self._stale = self._clock(), False
            issued = parse(await anyio.Path(self.path).read_bytes())
        except (OSError, CredentialsError) as exc:
            error = str(exc.strerror or exc) if isinstance(exc, OSError) else str(exc)
            if error != self._error:  # once per distinct problem, not every second
                self._failed(error)
            # `_seen` stays as it was: a half-written file is read again at the next check.
            return
        self._seen = seen
        self._loaded(issued)


async def run_command(argv: Sequence[str], timeout: float) -> bytes:
    """Run `argv` (no shell, stdin closed) and return its stdout; CredentialsError when it
    cannot start, times out (it is killed) or exits non-zero (with the end of its stderr)."""
    try:
        with anyio.fail_after(timeout):
            done = await anyio.run_process(list(argv), stdin=subprocess.DEVNULL, check=False)
    except TimeoutError:
        raise CredentialsError(f"no answer within {timeout:g}s (killed)") from None
    except OSError as exc:
        raise CredentialsError(f"cannot run {argv[0]!r}: {exc.strerror or exc}") from None
    if done.returncode != 0:
        # Logged and shown by /readyz: a failed login may print the token it tried.
        err = redact_text(done.stderr.decode(errors="replace").strip())[-STDERR_SHOWN:]
        raise CredentialsError(f"exited with {done.returncode}: {err or '(no stderr)'}")
    return done.stdout


class CommandCredentials(_Reloading):
    """`credentials = "command"`: a command's stdout, run again before expiry."""

    kind = "command"

    def __init__(
        self,
        argv: Sequence[str],
        timeout: float,
        clock: Clock = time.time,
        run: CommandRunner = run_command,
    ) -> None:
        super().__init__(f"command {os.path.basename(argv[0])!r}", clock)
        self.argv = tuple(argv)
        self.timeout = timeout
        self._run = run
        self.failures = 0  # failed runs in a row

    def _next_attempt(self, now: float) -> float:
        if self._stale:
            return self._invalidation_due()
        if self.failures:
            return self._attempted_at + backoff(self.failures)
        issued = self._issued
        if issued is None or issued.expiration is None:
            return math.inf if issued is not None else now
        due = refresh_at(self._fetched_at, issued.expiration)
        return max(due, self._attempted_at + MIN_REFRESH_GAP_S)

    async def _attempt(self) -> None:
        self._attempted_at, self._stale = self._clock(), False
        try:
            issued = parse(await self._run(self.argv, self.timeout))
            if issued.expiration is not None and issued.expiration <= self._clock():
                raise CredentialsError(
                    f"it printed credentials that expired at {iso(issued.expiration)}"
                )
        except CredentialsError as exc:
            self.failures += 1
            self._failed(str(exc), retry_in_s=backoff(self.failures))
            return
        self.failures = 0
        self._loaded(issued)
        if issued.expiration is not None:
            at = refresh_at(self._fetched_at, issued.expiration)
            log.debug("credentials_refresh_scheduled", refresh_at=iso(at))


def provider_for(source: SourceConfig, clock: Clock = time.time) -> CredentialsProvider:
    """The provider `source.credentials` names (the config has validated its keys)."""
    if source.credentials == "file":
        return FileCredentials(Path(source.credentials_file), clock)
    if source.credentials == "command":
        argv = shlex.split(source.credentials_command)
        return CommandCredentials(argv, source.credentials_command_timeout, clock)
    creds = Credentials(source.access_key_id, source.access_key_secret, source.security_token)
    return StaticCredentials(creds, source.credentials)
