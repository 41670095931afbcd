"""Fuzzing every endpoint of one real `loghubd serve` with hypothesis-generated requests
(strategies in the package tests/reliability/fuzz/, one module per route family): malformed
and truncated protobuf, lz4/zstd/deflate bombs with a lying `x-log-bodyrawsize`, huge and odd
headers, invalid and foreign cursors, non-UTF-8 values, out-of-range shard ids, broken JSON,
wrong methods, APIs loghubd does not implement, malformed HTTP.

Per request: never a 5xx; a request aimed at the protected data is refused with a 4xx; only
requests that are not valid HTTP may go unanswered. After each family: the server is alive
and logged no unhandled exception, its RSS grew less than 50 MB since the start, the checksum
of the protected data is unchanged, and whatever the fuzz wrote to the scratch project reads
back. LOGHUBD_FUZZ_EXAMPLES sets the total number of examples (default 3000; the long run,
bench/fuzz_long.py, uses 100,000+).

Reproducible and isolated: a failing request is shrunk and printed by hypothesis with the
`@reproduce_failure` blob that replays it; each family (and each regression) checks the
protected data against the checksum taken just before it ran, and a family that changed it
fails alone: the next one starts from the data as it is then, so one finding does not fail
every later test.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings

from loghubd.server import api, routes
from tests.reliability.fuzz import (
    FAMILIES,
    HOST_SUFFIX,
    STRATEGIES,
    Req,
    Target,
    examples,
    q,
    rss_kb,
    write_stats,
)

RSS_GROWTH_LIMIT_MB = 50
TIMEOUT = max(120, int(max(examples(f) for f in FAMILIES) * 0.1))

pytestmark = pytest.mark.timeout(TIMEOUT)


def fuzz_settings(n: int) -> settings:
    return settings(
        max_examples=n,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        print_blob=True,  # a failure prints the @reproduce_failure that replays it
    )


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    t = Target(tmp_path_factory.mktemp("fuzz")).start()
    yield t
    t.close()


@pytest.mark.parametrize("family", list(FAMILIES))
def test_fuzz_family_no_5xx_protected_data_unchanged(target: Target, family: str) -> None:
    first = target.requests

    @fuzz_settings(examples(family))
    @given(STRATEGIES[family](target.layout))
    def one(req: Req) -> None:
        target.check(req)

    before = target.checksum()
    try:
        one()
    finally:  # whatever happened, the next family compares against the data as it is now
        changed = target.settle(before)
    sent = target.requests - first
    assert target.alive(), f"the server died:\n{target.server.log_tail()}"
    errors = target.error_log_lines()
    assert not errors, f"{len(errors)} unhandled exception(s) in the server log: {errors[-1]}"
    grown_mb = (rss_kb(target.pid) - target.baseline_rss_kb) / 1024
    peak_mb = rss_kb(target.pid, "VmHWM") / 1024
    assert grown_mb < RSS_GROWTH_LIMIT_MB, f"server RSS grew by {grown_mb:.0f} MB"
    assert not changed, f"the protected data changed during {family}: {changed}"
    groups_read = target.read_back_scratch()
    extra = {
        "sent": sent,
        "rss_growth_mb": round(grown_mb, 1),
        "peak_rss_mb": round(peak_mb, 1),
        "scratch_groups_read_back": groups_read,
        "scratch_repairs": target.repairs,
    }
    write_stats(target, family, extra)
    print(f"\n{family}: {extra}")


def _route_of(req: Req) -> str:
    """The SLS API a generated request reaches (`routes.Api.name`), as the server resolves it."""
    if req.raw is not None:
        return "raw"
    parts = tuple(p for p in req.path.split("/") if p)
    if req.host is not None:
        host = req.host.decode("latin-1")
    else:
        host = f"{req.project}.{HOST_SUFFIX}" if req.project else HOST_SUFFIX
    kind = "service" if api.host_project(host) is None else "project"
    try:
        route = routes.resolve(req.method, parts, kind)
    except Exception:
        return "none"
    query = {k.decode("utf-8", "replace"): v.decode("utf-8", "replace") for k, v in req.query}
    return route.api_for(query).name


def test_fuzz_strategies_cover_every_route(target: Target) -> None:
    """Every API of the route table, each `type=`/`action=` variant included, is generated."""
    seen: set[str] = set()
    for make in STRATEGIES.values():

        @settings(fuzz_settings(300), derandomize=True)  # the same draws every run: no flake
        @given(make(target.layout))
        def collect(req: Req) -> None:
            seen.add(_route_of(req))

        collect()
    wanted = set(routes.every_api())
    assert wanted <= seen, f"never generated: {sorted(wanted - seen)}"


KEEP_BASE = "/logstores/keep"
HUGE = str(2**63)  # one past SQLite's integer range

# Requests the fuzz found mishandled (the answer they got before the fix).
REGRESSIONS = [
    # 200, and the next TTL sweep deleted every stored log of the logstore
    Req("UpdateLogStore", "PUT", KEEP_BASE, body=b'{"ttl": -1}', must_refuse=True),
    Req("UpdateLogStore", "PUT", KEEP_BASE, body=b'{"ttl": 0}', must_refuse=True),
    # 500 (OverflowError in SQLite)
    Req(
        "UpdateLogStore", "PUT", KEEP_BASE, body=b'{"ttl": -10223663560643172352}', must_refuse=True
    ),
    # 500 (AttributeError: 'list' object has no attribute 'get'); [] was a 200 that blanked
    # the project's description
    Req("UpdateProject", "PUT", "/", body=b'["\xc2\x8a"]', must_refuse=True),
    Req("UpdateProject", "PUT", "/", body=b"2147483648", must_refuse=True),
    Req("UpdateProject", "PUT", "/", body=b"[]", must_refuse=True),
    # 500 (OverflowError: Python int too large to convert to SQLite INTEGER)
    Req("DeleteShard", "DELETE", f"{KEEP_BASE}/shards/{HUGE}", must_refuse=True),
    Req("MergeShard", "POST", f"{KEEP_BASE}/shards/{HUGE}", q(action="merge"), must_refuse=True),
    Req(
        "GetShard:cursor", "GET", f"{KEEP_BASE}/shards/{HUGE}", q(type="cursor", **{"from": "end"})
    ),
    # 500 (OverflowError); a time that far ahead is simply the end
    Req("GetShard:cursor", "GET", f"{KEEP_BASE}/shards/0", q(type="cursor", **{"from": "9" * 30})),
    Req(
        "ConsumerGroupUpdateCheckPoint",
        "POST",
        f"{KEEP_BASE}/consumergroups/kg",
        q(type="checkpoint", consumer="c", forceSuccess="true"),
        body=b'{"shard": ' + HUGE.encode() + b', "checkpoint": "MA=="}',
        must_refuse=True,
    ),
    # 500; and the group kept the bad timeout in memory, so every later change to it (a
    # consumer joining) failed with 500 until the server restarted
    Req(
        "UpdateConsumerGroup",
        "PUT",
        f"{KEEP_BASE}/consumergroups/kg",
        body=b'{"timeout": 1180591620717411303424}',
        must_refuse=True,
    ),
    Req(
        "CreateConsumerGroup",
        "POST",
        f"{KEEP_BASE}/consumergroups",
        body=b'{"consumerGroup": "nxg", "timeout": 1180591620717411303424, "order": false}',
        must_refuse=True,
    ),
    # 500 (UnicodeEncodeError: surrogates not allowed), Host bytes that are not UTF-8
    Req("ListShards", "GET", f"{KEEP_BASE}/shards", host=b"\xff\xfe.sls.local"),
    Req("GetProject", "GET", "/", host=b"\xff\xfe.sls.local"),
    # a client gone mid-body was logged as an unhandled exception (and counted as a 500)
    Req(
        "TruncatedBody",
        "POST",
        raw=b"POST /logstores/s1/shards/lb HTTP/1.1\r\nHost: fzscratch.x\r\n"
        b"Content-Length: 100\r\n\r\nabc",
        half_close=True,
    ),
]


@pytest.mark.parametrize("req", REGRESSIONS, ids=lambda r: r.api)
def test_fuzz_findings_stay_fixed(target: Target, req: Req) -> None:
    errors_before = len(target.error_log_lines())
    before = target.checksum()
    try:
        reply = target.check(req)  # no 5xx; a 4xx where it must refuse; answered unless raw
    finally:
        changed = target.settle(before)
    assert reply is not None or req.raw is not None
    time.sleep(0.05)  # the server logs after it answered
    assert len(target.error_log_lines()) == errors_before, target.error_log_lines()[-1]
    assert not changed, changed
