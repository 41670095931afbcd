"""loghubd: consume LogHub (Alibaba Cloud SLS) logstores through consumer groups.

The public API for plugin authors lives here; everything else is internal.
"""

__version__ = "0.1.0"
