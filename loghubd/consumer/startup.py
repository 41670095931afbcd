"""A source's start-up calls: the consumer group made sure of, retried while the service is
down, a permanent refusal turned into `StartupError` (the message says what to fix)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

import anyio
import structlog

from loghubd.backoff import Backoff
from loghubd.config import ConsumerConfig
from loghubd.consumer.terms import GroupTerms, group_timeout
from loghubd.plugins.api import SinkUnreachable
from loghubd.plugins.manager import why
from loghubd.protocol import errors as E
from loghubd.sls import SlsClient, Unreachable

log = structlog.get_logger("loghubd.source")

STARTUP_BACKOFF = Backoff(initial=1.0, cap=30.0)


class StartupError(Exception):
    """A source cannot start: a permanent error (bad credentials, missing logstore, a
    request the service refuses). Retrying would not help; the message says what to fix.

    `exit_code` follows the commands' table (docs/operations.md, "Exit codes and errors"):
    3 when the project, logstore or group does not exist, 2 when the service refuses a name
    or a parameter of the configuration (or the processor's `start()` refuses its options),
    4 when the processor's `start()` cannot reach its sink, 1 otherwise (credentials
    refused: keys can be fixed or rotated without touching the configuration, so a
    supervisor may well try again)."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def exit_code_of(exc: E.SlsError) -> int:
    """The exit code of a start-up that the service refused with `exc`."""
    if isinstance(exc, E.ProjectNotExist | E.LogStoreNotExist | E.ConsumerGroupNotExist):
        return 3
    if isinstance(exc, E.ParameterInvalid | E.JsonInfoInvalid | E.LogStoreInfoInvalid):
        return 2
    return 1


async def ensure_group(
    client: SlsClient, logstore: str, c: ConsumerConfig, terms: GroupTerms
) -> None:
    """Create the group if it is missing; if it exists with other settings, keep them (every
    worker rewriting them would make the group's config flap between deployments), and
    heartbeat by the group's timeout (`terms`)."""
    want = {"timeout": int(c.timeout), "order": c.order}
    groups = await client.list_groups(logstore)
    for existing in groups:
        if existing.get("name") == c.group:
            terms.update(group_timeout(groups, c.group))
            have = {"timeout": existing.get("timeout"), "order": existing.get("order")}
            if have != want:
                log.warning(
                    "consumer_group_settings_differ",
                    group=c.group,
                    server=have,
                    configured=want,
                    action="keeping the server's settings",
                    heartbeat_interval=terms.interval,
                )
            return
    try:
        await client.create_group(logstore, c.group, int(c.timeout), c.order)
        others = sorted(str(g.get("name", "")) for g in groups)
        level = creation_level(others)
        extra = {"other_groups": others[:20], "start": c.start} if level == "warning" else {}
        getattr(log, level)("consumer_group_created", group=c.group, **want, **extra)
    except E.ConsumerGroupAlreadyExist:
        pass  # another worker created it first: the heartbeats re-read its timeout
    except E.ConsumerGroupQuotaExceed as exc:
        # Bounded runs with a fresh group each (backfills from cron) leave their groups.
        raise StartupError(
            f"cannot create consumer group {c.group}: the logstore has as many groups as "
            f"the service allows ({exc.message}); delete the ones no longer used (`loghubd "
            "group list`, then `loghubd group delete GROUP --yes`)",
            2,
        ) from exc
    terms.update(float(int(c.timeout)))


async def check_against_the_logstore(
    client: SlsClient, logstore: str, c: ConsumerConfig, keys: str
) -> None:
    """What only the service can tell of the configuration (`keys`: `consumer`, or
    `sources.<name>.consumer`), before any shard is read: one ListShards for both checks.

    - `consumer.shards` ids the logstore does not have yet are logged (a split or merge
      makes new ids, so they may come); a bounded run none of whose shards exists is
      StartupError (exit 3): it would end at once, 0, having read nothing.
    - `consumer.query` is compiled by the service: one pull of no logs with it, at the end of
      the first shard. A query it refuses is StartupError (exit 2) naming the key, where
      otherwise every shard would stop on its first pull, and a bounded run over an empty
      window would end 0 having checked nothing."""
    if c.shards is None and not c.query:
        return
    shards = [int(s["shardID"]) for s in await client.list_shards(logstore)]
    if c.shards is not None:
        _check_shard_filter(logstore, sorted(shards), c.shards, c.end is not None, keys)
    if c.query and shards:
        cursor = await client.get_cursor(logstore, shards[0], "end")
        try:
            await client.pull(logstore, shards[0], cursor, 1, query=c.query)
        except (E.ParameterInvalid, E.NotSupported) as exc:
            raise StartupError(
                f"{keys}.query: the service refuses the query: {exc.message} (docs/spl.md)", 2
            ) from exc


def _check_shard_filter(
    logstore: str, have: list[int], wanted: tuple[int, ...], bounded: bool, keys: str
) -> None:
    missing = sorted(set(wanted) - set(have))
    if not missing:
        return
    if bounded and len(missing) == len(set(wanted)):
        raise StartupError(
            f"{keys}.shards: no shard {', '.join(map(str, missing))} in logstore {logstore} "
            f"(it has {', '.join(map(str, have)) or 'none'}): this bounded run would read "
            "nothing",
            3,
        )
    log.warning(
        "shards_not_in_logstore",
        key=f"{keys}.shards",
        shards=missing,
        logstore_shards=have,
        hint="not consumed unless a split or merge makes them; check the shard ids",
    )


def start_refused(processor: str, exc: Exception) -> StartupError:
    """The processor's `start()` failed: one line naming it, and the exit code of the
    commands' table. A ValueError refuses its configuration (2; its message names the key,
    else the processor is named), SinkUnreachable a sink it cannot reach yet (4: a restart
    may succeed), anything else 1. The traceback is logged under --debug only."""
    where = f"processor.{processor}"
    if isinstance(exc, ValueError | SinkUnreachable):
        text = " ".join(str(exc).split())[:1000]
        code = 2 if isinstance(exc, ValueError) else 4
        return StartupError(text if text.startswith(where) else f"{where}: {text}", code)
    return StartupError(f"{where}: start() failed: {why(exc)}"[:1000], 1)


async def retry_until_ok(
    what: str,
    fn: Callable[[], Awaitable[None]],
    failing: Callable[[str], None] = lambda reason: None,
    explain: Callable[[E.SlsError], str] = str,
    endpoint_key: str = "source.endpoint",
) -> None:
    """Start-up calls: a daemon under systemd waits out a service that is down or busy instead
    of crash-looping, but a permanent refusal (4xx) stops it at once with the reason. `what`
    says in an operator's words what was being done; `failing` is told why each attempt
    failed (the source's /status error and /readyz reason while it retries), "" at the end;
    `explain` words a refusal (`loghubd.admin.connect.explain_refusal`: the key to fix, as
    `loghubd status` names it). An https:// endpoint in front of a plain-HTTP service is
    refused at once too (exit 2, naming `endpoint_key`): no wait would mend the scheme."""
    attempt = 0
    while True:
        try:
            await fn()
            failing("")
            return
        except E.SlsError as exc:
            if isinstance(exc, Unreachable) and exc.wrong_scheme:
                raise StartupError(f"{what}: {endpoint_key}: {exc.cause}", 2) from exc
            if not exc.retryable:
                raise StartupError(f"{what}: {explain(exc)}", exit_code_of(exc)) from exc
            attempt += 1
            wait = STARTUP_BACKOFF.wait(attempt)
            reason = f"{what}: {exc} (retrying)"
            if isinstance(exc, Unreachable):
                reason = f"{what}: cannot reach the service, retrying: {exc}"
            failing(reason)
            log.warning("startup_call_failed", call=what, error=str(exc)[:1000], retry_in_s=wait)
            await anyio.sleep(wait)


def creation_level(existing_group_names: Iterable[str]) -> str:
    """The log level of `consumer_group_created`, given the names of the groups the logstore
    had before: "warning" when it had any. A new group starts every shard at
    `consumer.start` (`begin` by default), so next to existing groups it is most likely a
    misspelt `consumer.group` of a migration, about to read the logstore again; "info" on a
    logstore with no group yet (a first deployment)."""
    return "warning" if any(name for name in existing_group_names) else "info"
