"""Where an operator command connects: flags, else the `-c` config file, else the
environment; and the client it uses (signed as the daemon signs).

One credentials convention for every command: the config file's `[source]`, overridden by
`LOGHUBD_SOURCE__ACCESS_KEY_ID`, `LOGHUBD_SOURCE__ACCESS_KEY_SECRET` and
`LOGHUBD_SOURCE__SECURITY_TOKEN` (the names `loghubd run` reads). The older
`LOGHUBD_ACCESS_KEY_ID` / `_SECRET` of `loghubd produce` are still read when those are unset.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio

from loghubd.admin.errors import ENV_KEYS, USAGE, Context, UserError, check_endpoint, refusal
from loghubd.config import Config, SourceSpec
from loghubd.config.layers import source_env_prefix
from loghubd.protocol.errors import SlsError
from loghubd.protocol.signing import Credentials
from loghubd.sls.credentials import CredentialsProvider, StaticCredentials, provider_for

if TYPE_CHECKING:
    from loghubd.sls.client import SlsClient


def env_credentials(environ: Mapping[str, str]) -> Credentials:
    def pick(new: str, old: str) -> str:
        return environ.get(f"LOGHUBD_SOURCE__{new}") or environ.get(f"LOGHUBD_{old}", "")

    return Credentials(
        pick("ACCESS_KEY_ID", "ACCESS_KEY_ID"),
        pick("ACCESS_KEY_SECRET", "ACCESS_KEY_SECRET"),
        pick("SECURITY_TOKEN", "SECURITY_TOKEN"),
    )


@dataclass(frozen=True, slots=True)
class Target:
    endpoint: str
    project: str
    logstore: str
    group: str
    provider: CredentialsProvider
    auth_version: str = "v1"
    region: str = ""
    timeout: float = 10.0
    credentials: str = ""  # where the keys come from (`credentials_origin`)
    keys: str = "source"  # how the fix names the keys (`SourceSpec.keys`)

    @property
    def context(self) -> Context:
        return Context(
            self.endpoint, self.project, self.logstore, self.group, self.credentials, self.keys
        )


def credentials_origin(cfg: Config | None, path: str | None) -> str:
    """Where a command's keys come from, for the fix of a refused request: the environment
    without -c; with -c, the source's section of that file (or what its provider reads)."""
    if cfg is None or not path:
        return ""  # Context's default: the LOGHUBD_SOURCE__* variables
    return source_credentials(cfg.sources[0], path, multi=cfg.multi)


def source_context(spec: SourceSpec) -> Context:
    """What `loghubd run` names when the service refuses a start-up call of source `spec`:
    the source's own keys and env variables, and its config file (no flags: `run` has none;
    the endpoint is in the line already, as the step that failed)."""
    return Context(
        project=spec.source.project,
        logstore=spec.source.logstore,
        group=spec.consumer.group,
        credentials=source_credentials(spec, spec.origin or "the configuration", spec.multi),
        keys=spec.keys,
        flags=False,
    )


def explain_refusal(spec: SourceSpec, exc: SlsError) -> str:
    """`loghubd run`'s line for a start-up call of `spec` the service refused: what
    `loghubd status -c` says of it (`errors.refusal`), with this source's keys."""
    return refusal(exc, source_context(spec))


def source_credentials(spec: SourceSpec, path: str, multi: bool) -> str:
    """Where source `spec`'s keys come from (configured in `path`), for the fix of a refusal:
    its section of the file and the env variables that override it, or what its provider
    reads."""
    section = f"[[sources]] {spec.name!r}" if multi else "[source]"
    kind = spec.source.credentials
    if kind == "env":
        return (
            "ALIBABA_CLOUD_ACCESS_KEY_ID and ALIBABA_CLOUD_ACCESS_KEY_SECRET "
            f'(credentials = "env" in the {section} of {path})'
        )
    if kind in ("file", "command"):
        return f'what credentials = "{kind}" in the {section} of {path} gives'
    if multi:
        prefix = source_env_prefix(spec.name)
        env = f"{prefix}__ACCESS_KEY_ID and {prefix}__ACCESS_KEY_SECRET"
    else:
        env = ENV_KEYS
    return f"the {section} of {path}, or {env}, which override it"


def positive_seconds(flag: str, value: float) -> float:
    """`value` if it is a usable number of seconds (finite, > 0), else a UserError naming
    `flag`: a timeout of 0 or less would fail every call as if the service were down."""
    if not (math.isfinite(value) and value > 0):
        raise UserError(USAGE, f"{flag} {value:g}: must be a number of seconds above 0")
    return value


def target(
    args: argparse.Namespace,
    cfg: Config | None,
    environ: Mapping[str, str],
    *,
    need_group: bool = True,
) -> Target:
    src = cfg.source if cfg else None
    endpoint = getattr(args, "endpoint", None) or (src.endpoint if src else "")
    project = getattr(args, "project", None) or (src.project if src else "")
    logstore = getattr(args, "logstore", None) or (src.logstore if src else "")
    group = getattr(args, "group", None) or (cfg.consumer.group if cfg else "")
    timeout = positive_seconds("--timeout", float(getattr(args, "timeout", 10.0)))
    wanted = [("--endpoint", endpoint), ("--project", project), ("--logstore", logstore)]
    if need_group:
        # `status` takes the group as --group, the `group` subcommands as an argument.
        wanted.append((getattr(args, "group_label", "GROUP"), group))
    missing = [name for name, value in wanted if not value]
    if missing:
        them = "them" if len(missing) > 1 else "it"
        raise UserError(
            USAGE,
            f"{', '.join(missing)} required, or -c CONFIG to take {them} from a config file",
        )
    check_endpoint(endpoint, project=project)
    provider: CredentialsProvider
    if src is not None:
        provider = provider_for(src)
    else:
        provider = StaticCredentials(env_credentials(environ))
    return Target(
        endpoint=endpoint,
        project=project,
        logstore=logstore,
        group=group or "",
        provider=provider,
        auth_version=src.auth_version if src else "v1",
        region=src.region if src else "",
        timeout=timeout,
        credentials=credentials_origin(cfg, getattr(args, "config", None)),
        keys=cfg.sources[0].keys if cfg else "source",
    )


@asynccontextmanager
async def client_for(t: Target) -> AsyncIterator[SlsClient]:
    """A client to `t`, its credentials loaded (a file read, a command run) and kept fresh."""
    import aiohttp  # here: the commands that never connect (--help) do not pay for it

    from loghubd.sls.client import SlsClient

    async with aiohttp.ClientSession() as session, anyio.create_task_group() as tg:
        await tg.start(t.provider.run_refresh)
        try:
            yield SlsClient(
                session,
                t.endpoint,
                t.project,
                t.provider.get,
                auth_version=t.auth_version,
                region=t.region,
                request_timeout=t.timeout,
            )
        finally:
            tg.cancel_scope.cancel()
