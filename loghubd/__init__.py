"""loghubd: consume LogHub (Alibaba Cloud SLS) logstores through consumer groups.

The public API for plugin authors lives here; everything else is internal.
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

__version__ = "0.1.0"

hookimpl = pluggy.HookimplMarker("loghubd")

__all__ = [
    "Ack",
    "Batch",
    "Processor",
    "ProcessorContext",
    "ProcessorFactory",
    "ProcessorSpec",
    "Record",
    "Tracker",
    "__version__",
    "hookimpl",
]
