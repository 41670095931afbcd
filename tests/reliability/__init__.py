"""Reliability harnesses: chaos runs, a fault-injecting TCP proxy, request fuzzing.

The same code serves the short CI tests in this package and the long runs in `bench/`
(`chaos_long.py`, `faultproxy_long.py`, `fuzz_long.py`); RELIABILITY.md has the figures.
"""
