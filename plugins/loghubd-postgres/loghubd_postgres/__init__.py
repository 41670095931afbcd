"""loghubd-postgres: a loghubd processor writing logs into PostgreSQL by COPY, exactly once.

See README.md for the configuration, the guarantee and how to query the output.
"""
