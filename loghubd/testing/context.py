"""A `ProcessorContext` for a processor's unit tests, as the daemon hands one to `bind`."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from loghubd.plugins.api import ProcessorContext
from loghubd.protocol.signing import Credentials


def make_context(
    *,
    endpoint: str = "http://127.0.0.1:1",
    project: str = "test-project",
    logstore: str = "test-logstore",
    group: str = "test-group",
    consumer: str = "test-consumer",
    credentials: Credentials | None = None,
    metrics_registry: CollectorRegistry | None = None,
    replay: bool = False,
) -> ProcessorContext:
    """A context whose source is `endpoint`/`project`/`logstore` (nothing listens on the
    default endpoint), with static `credentials` (none by default) and `metrics_registry`
    (pass one to read the processor's series back with `registry.get_sample_value`);
    `replay=True` binds a factory as `loghubd dead-letters replay` does."""
    keys = credentials or Credentials("", "")
    return ProcessorContext(
        endpoint=endpoint,
        project=project,
        logstore=logstore,
        credentials=lambda: keys,
        group=group,
        consumer=consumer,
        metrics_registry=metrics_registry or CollectorRegistry(auto_describe=True),
        replay=replay,
    )
