"""Operator tools: `loghubd group` (list, describe, reset, delete), `loghubd status`, the
dead-letter replay, and the error lines every command prints instead of a traceback.

Everything here is built from the standard SLS calls (list/get consumer groups, checkpoints,
list shards, cursors and their times, pulls), so it works against Alibaba Cloud SLS as well as
`loghubd serve`; serve's group-status extension is only an optional enrichment."""
