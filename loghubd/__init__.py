"""loghubd: consume LogHub (Alibaba Cloud SLS) logstores through consumer groups.

The public API for plugin authors lives here; everything else is internal: the processor seam
(`loghubd.plugins.api`), the batch model (`loghubd.models`) and the SLS client with its
credentials providers and errors (`loghubd.sls`).
"""

import pluggy

from loghubd.models import Batch, Record
from loghubd.plugins.api import (
    Ack,
    Processor,
    ProcessorContext,
    ProcessorFactory,
    ProcessorSpec,
    Tracker,
)
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

hookimpl = pluggy.HookimplMarker("loghubd")

__all__ = [
    "Ack",
    "Batch",
    "CommandCredentials",
    "Credentials",
    "CredentialsError",
    "CredentialsProvider",
    "CredentialsSource",
    "CredentialsUnavailable",
    "FileCredentials",
    "Processor",
    "ProcessorContext",
    "ProcessorFactory",
    "ProcessorSpec",
    "Pulled",
    "Record",
    "SlsClient",
    "SlsError",
    "StaticCredentials",
    "Tracker",
    "Unreachable",
    "__version__",
    "hookimpl",
    "provider_for",
]
