"""loghubd: consume LogHub (Alibaba Cloud SLS) logstores through consumer groups.

The public API for plugin authors lives here; everything else is internal: the processor seam
(`loghubd.plugins.api`), the batch model (`loghubd.models`), the write-ahead log that file
sinks share for exactly once (`loghubd.wal`) and the SLS client with its
credentials providers and errors (`loghubd.sls`). `redact_text` / `redact_value` mask secrets
in what a plugin prints of its options (`loghubd.config.redact`).
"""

from typing import TYPE_CHECKING

from loghubd._lazy import lazy_names

if TYPE_CHECKING:
    from loghubd.backoff import Backoff
    from loghubd.config.redact import redact_text, redact_value
    from loghubd.consumer.tracking import until_stopping
    from loghubd.models import Batch, Record
    from loghubd.plugins.api import (
        Ack,
        BatchInterrupted,
        BatchRejected,
        Bindable,
        CliCommand,
        Closable,
        Committed,
        Flushable,
        Processor,
        ProcessorContext,
        ProcessorFactory,
        ProcessorSpec,
        Redeliverable,
        SinkUnreachable,
        Startable,
        StopSignal,
        Tracker,
    )
    from loghubd.plugins.hookspecs import hookimpl
    from loghubd.sls import (
        CommandCredentials,
        Credentials,
        CredentialsError,
        CredentialsProvider,
        CredentialsSource,
        CredentialsUnavailable,
        FileCredentials,
        Pulled,
        SlsClient,
        SlsError,
        StaticCredentials,
        Unreachable,
        provider_for,
    )

__version__ = "0.1.0"


__all__ = [
    "Ack",
    "Backoff",
    "Batch",
    "BatchInterrupted",
    "BatchRejected",
    "Bindable",
    "CliCommand",
    "Closable",
    "CommandCredentials",
    "Committed",
    "Credentials",
    "CredentialsError",
    "CredentialsProvider",
    "CredentialsSource",
    "CredentialsUnavailable",
    "FileCredentials",
    "Flushable",
    "Processor",
    "ProcessorContext",
    "ProcessorFactory",
    "ProcessorSpec",
    "Pulled",
    "Record",
    "Redeliverable",
    "SinkUnreachable",
    "SlsClient",
    "SlsError",
    "Startable",
    "StaticCredentials",
    "StopSignal",
    "Tracker",
    "Unreachable",
    "__version__",
    "hookimpl",
    "provider_for",
    "redact_text",
    "redact_value",
    "until_stopping",
]

# Every name is imported on first use: `import loghubd` costs ~1 ms, so the console script
# (`loghubd._entry`) can hold SIGHUPs before the command line's imports, and a plugin or the
# server does not pay for aiohttp unless it talks to SLS.
_LAZY = {
    name: module
    for module, names in {
        "loghubd.backoff": ("Backoff",),
        "loghubd.config.redact": ("redact_text", "redact_value"),
        "loghubd.consumer.tracking": ("until_stopping",),
        "loghubd.models": ("Batch", "Record"),
        "loghubd.plugins.api": (
            "Ack",
            "BatchInterrupted",
            "BatchRejected",
            "Bindable",
            "CliCommand",
            "Closable",
            "Committed",
            "Flushable",
            "Processor",
            "ProcessorContext",
            "ProcessorFactory",
            "ProcessorSpec",
            "Redeliverable",
            "SinkUnreachable",
            "Startable",
            "StopSignal",
            "Tracker",
        ),
        "loghubd.plugins.hookspecs": ("hookimpl",),
        "loghubd.sls": (
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
        ),
    }.items()
    for name in names
}
assert set(_LAZY) == set(__all__) - {"__version__"}, "every public name has its module"


__getattr__ = lazy_names(__name__, _LAZY)
