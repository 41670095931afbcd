"""loghubd-spark: the `spark` processor for loghubd (see README.md)."""

__version__ = "0.1.0"
