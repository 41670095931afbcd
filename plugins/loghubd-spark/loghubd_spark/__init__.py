"""loghubd-spark: the `spark` processor for loghubd, and the `loghub` Structured Streaming
source (`LogHubDataSource`); see README.md."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["LogHubDataSource", "__version__"]

if TYPE_CHECKING:
    from loghubd_spark.stream import LogHubDataSource


def __getattr__(name: str) -> Any:
    # Lazily: importing the package (the daemon loads the processor plugin through it) must
    # not import pyspark.
    if name == "LogHubDataSource":
        from loghubd_spark.stream import LogHubDataSource

        return LogHubDataSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
