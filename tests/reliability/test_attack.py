"""`loghubd serve` under a resource attack (issue 13, items 5-7), a real server over HTTP.

40 concurrent ~10 MB uploads (20 signed, 20 unsigned), 25 connections that send their
request head a byte a second, 25 that send their body a KB a second, and normal traffic, all
at once for 12 s (tests/reliability/attack.py). The bounds asserted are the ones
RELIABILITY.md documents, with room for a loaded machine:

- peak RSS above the idle server: at most 2 x `--max-inflight-body-bytes` (64 MiB) + 64 MB;
- every slow connection closed within its timeout (+5 s of scheduling slack, SLACK_S);
- every normal request answered, p99 under 10 s.

That the 503 of the bound is one the official SDK retries is
tests/integration/test_server_hardening.py::test_the_sdk_retries_the_busy_answer.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability import attack

BUDGET_MB = 64
RSS_BOUND_MB = 2 * BUDGET_MB + 64
# Scheduling slack of a slow connection's close, as its client thread sees it: one of ~90
# threads in a process beside the suite's other workers and JVMs on 2 cores. 3 s was once
# exceeded by 0.73 s in CI. A connection never closed would stay open for the whole attack
# and 30 s more.
SLACK_S = 5.0

pytestmark = pytest.mark.timeout(180)


def test_memory_slow_clients_and_latency_under_attack(tmp_path: Path) -> None:
    cfg = attack.AttackConfig()
    result = attack.AttackRun(tmp_path, cfg).run()
    summary = result.summary()
    print(f"\nattack: {summary}")
    assert summary["growth_mb"] < RSS_BOUND_MB, summary
    assert summary["slow_heads_open"] == 0 and summary["slow_bodies_open"] == 0, summary
    assert summary["slow_heads_closed_max_s"] <= cfg.header_timeout + SLACK_S, summary
    assert summary["slow_bodies_closed_max_s"] <= cfg.body_timeout + SLACK_S, summary
    assert not result.normal_failures, result.normal_failures[:5]
    assert summary["normal_requests"] >= 5, summary
    assert summary["normal_p99_ms"] < 10_000, summary
    uploads = result.uploads
    assert uploads["signed 200"] > 0, uploads
    assert uploads["signed 503"] > 0, uploads  # the budget was reached, and answered so
    # Every unsigned upload is answered 401 from its head. Under load the client may not get
    # its 10 MB out within the body timeout the server drains it for: that connection is
    # cut then (counted apart), never sooner.
    unsigned = {k: n for k, n in uploads.items() if k.startswith("unsigned")}
    assert unsigned.get("unsigned 401", 0) > 0, uploads
    assert set(unsigned) <= {"unsigned 401", "unsigned 401 (body cut after the body timeout)"}, (
        uploads
    )
