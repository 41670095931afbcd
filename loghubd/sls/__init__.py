"""The SLS client: the async HTTP client, the credentials providers that keep its keys fresh,
and its errors.

Everything a caller needs is re-exported here and from `loghubd` itself (plugins import
`from loghubd import SlsClient, ...`, never a module of this package):

- `client`: `SlsClient` (every call the daemon, `loghubd produce`/`status` and the Spark
  plugin make), `Pulled` (one PullLogs answer), `CredentialsSource`.
- `credentials`: the providers a source signs with (`StaticCredentials`, `FileCredentials`,
  `CommandCredentials`, built by `provider_for`), and the JSON shapes they read.
- `errors`: the client's own errors (`Unreachable`, `CredentialsUnavailable`,
  `CredentialsError`); the service's typed errors stay in `loghubd.protocol.errors`, which the
  server shares.
"""

from typing import TYPE_CHECKING

from loghubd._lazy import lazy_names

if TYPE_CHECKING:
    from loghubd.protocol.errors import SlsError
    from loghubd.protocol.signing import Credentials
    from loghubd.sls.client import CredentialsSource, Pulled, SlsClient
    from loghubd.sls.credentials import (
        CommandCredentials,
        CredentialsProvider,
        FileCredentials,
        StaticCredentials,
        provider_for,
    )
    from loghubd.sls.errors import CredentialsError, CredentialsUnavailable, Unreachable

__all__ = [
    "CommandCredentials",
    "Credentials",
    "CredentialsError",
    "CredentialsProvider",
    "CredentialsSource",
    "CredentialsUnavailable",
    "FileCredentials",
    "Pulled",
    "SlsClient",
    "SlsError",
    "StaticCredentials",
    "Unreachable",
    "provider_for",
]

# Each name from its module on first use: the errors (which every command's error reporting
# needs) come without aiohttp, whose import (~0.15-0.25 s, TLS contexts included) only the
# commands that talk to a service pay.
_FROM = {
    "SlsError": "loghubd.protocol.errors",
    "Credentials": "loghubd.protocol.signing",
    "CredentialsSource": "loghubd.sls.client",
    "Pulled": "loghubd.sls.client",
    "SlsClient": "loghubd.sls.client",
    "CommandCredentials": "loghubd.sls.credentials",
    "CredentialsProvider": "loghubd.sls.credentials",
    "FileCredentials": "loghubd.sls.credentials",
    "StaticCredentials": "loghubd.sls.credentials",
    "provider_for": "loghubd.sls.credentials",
    "CredentialsError": "loghubd.sls.errors",
    "CredentialsUnavailable": "loghubd.sls.errors",
    "Unreachable": "loghubd.sls.errors",
}


__getattr__ = lazy_names(__name__, _FROM)
