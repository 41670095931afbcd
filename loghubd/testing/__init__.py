"""Test support shipped with loghubd, for its own tests and plugin authors': run real
`loghubd serve` processes (`ServerProcess`; the `loghubd_server` and `loghubd_server_factory`
pytest fixtures in `pytest_plugin`), keep a child's ports until it listens
(`PortReservation`), serve an aiohttp application from the test's own process
(`serve_on_loopback`), poll them (`wait_until`), write logs to them from the test process
(`BackgroundProducer`, `produce_logs`: what `loghubd produce` writes, without a process per
call), and unit-test a processor with a `Batch` built from given logs (`make_batch`), a
`RecordingTracker` and the `ProcessorContext` a factory's `bind` gets (`make_context`).
docs/plugins.md shows them in use."""

from loghubd.testing.batches import RecordingTracker, make_batch
from loghubd.testing.context import make_context
from loghubd.testing.process import PortReservation, ServerProcess, free_port, free_ports
from loghubd.testing.producing import BackgroundProducer, produce_logs
from loghubd.testing.sites import serve_on_loopback
from loghubd.testing.waiting import wait_until

__all__ = [
    "BackgroundProducer",
    "PortReservation",
    "RecordingTracker",
    "ServerProcess",
    "free_port",
    "free_ports",
    "make_batch",
    "make_context",
    "produce_logs",
    "serve_on_loopback",
    "wait_until",
]
