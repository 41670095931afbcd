"""The Grafana dashboard against the real thing: Debian's Prometheus, started here on a free
loopback port with a 1 s scrape interval, scrapes a real daemon consuming five sources (one
through a processor that fails, so the error panels have data; one into `parquet` files, one
to an `http` endpoint and one into a real PostgreSQL, for the sink panels) and a real
`loghubd serve`.
Every panel's query, and every variable's, must return a series (the spark plugin's targets:
in its own end-to-end test, which runs the JVM); `promtool check metrics` must find nothing
to say about either /metrics."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loghubd.testing import ServerProcess, wait_until
from tests.integration.daemon_harness import Pool, plugin_env, source_entry
from tests.integration.http_receiver import Receiver
from tests.integration.prometheus import (
    Prometheus,
    expand,
    panel_queries,
    spark_query,
    tool,
    variable_queries,
)

# The postgres plugin's test server (Debian's binaries, a throw-away cluster).
PG_TESTS = Path(__file__).resolve().parents[2] / "plugins" / "loghubd-postgres" / "tests"
if str(PG_TESTS) not in sys.path:
    sys.path.insert(0, str(PG_TESTS))

from pg_server import PgServer  # noqa: E402

pytestmark = pytest.mark.slow

SOURCES = {"app", "audit", "lake", "push", "rows"}


@pytest.fixture
def prometheus_factory(tmp_path: Path) -> Iterator[Any]:
    started: list[Prometheus] = []

    def start(targets: dict[str, str]) -> Prometheus:
        prom = Prometheus(tmp_path / "prometheus", targets)
        started.append(prom)
        return prom

    yield start
    for prom in started:
        prom.stop()


def promtool_check_metrics(url: str) -> None:
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read()
    result = subprocess.run(
        [tool("promtool"), "check", "metrics"], input=text, capture_output=True, timeout=30
    )
    assert result.returncode == 0 and not result.stdout.strip() and not result.stderr.strip(), (
        url,
        result.stdout.decode() + result.stderr.decode(),
    )
    assert b"_created" not in text


def test_every_dashboard_panel_returns_a_series(
    loghubd_server: ServerProcess, daemon_pool: Pool, prometheus_factory: Any
) -> None:
    pool = daemon_pool
    pool.admin.create_logstore("dash-app", 2)
    pool.admin.create_logstore("dash-audit", 1)
    pool.admin.create_logstore("dash-lake", 1)
    pool.admin.create_logstore("dash-push", 1)
    pool.admin.create_logstore("dash-rows", 1)
    receiver = Receiver(record_ids=False).start()  # answers 200 at once
    pg = PgServer().start()
    try:
        _dashboard(loghubd_server, pool, prometheus_factory, receiver, pg.create_database("dash"))
    finally:
        receiver.stop()
        pg.stop()


def _dashboard(
    loghubd_server: ServerProcess,
    pool: Pool,
    prometheus_factory: Any,
    receiver: Receiver,
    dsn: str,
) -> None:
    daemon = pool.daemon(
        "dash-app",
        "dash",
        "dash-1",
        processor="jsonl",
        processor_options={"path": str(pool.dir / "unused")},
        consumer={"max_attempts": 2, "on_failure": "dead_letter", "retry_initial_backoff": 0.1},
        env=plugin_env(pool.site),
        sources=[
            source_entry(
                "app",
                pool.endpoint,
                "dash-app",
                processor={
                    "name": "flaky",
                    "flaky": {
                        "path": str(pool.dir / "out-app"),
                        "fail_id": "d150",
                        "fail_times": 1000,
                        "attempts": str(pool.dir / "attempts.jsonl"),
                    },
                },
            ),
            source_entry("audit", pool.endpoint, "dash-audit"),
            source_entry(
                "lake",
                pool.endpoint,
                "dash-lake",
                processor={
                    "name": "parquet",
                    "parquet": {"path": str(pool.dir / "lake"), "max_age_s": 0.5},
                },
            ),
            source_entry(
                "push",
                pool.endpoint,
                "dash-push",
                processor={"name": "http", "http": {"url": receiver.url}},
            ),
            source_entry(
                "rows",
                pool.endpoint,
                "dash-rows",
                processor={
                    "name": "postgres",
                    "postgres": {"dsn": dsn, "table": "logs", "create_table": True},
                },
            ),
        ],
    ).wait_ready()
    prom = prometheus_factory(
        {
            "loghubd": f"127.0.0.1:{daemon.ops_port}",
            "loghubd-serve": loghubd_server.endpoint.removeprefix("http://"),
        }
    )
    wait_until(prom.ready, 30, lambda: prom.log.read_text()[-3000:], interval=0.2)

    def scraped(times: int) -> bool:
        got = prom.query("count_over_time(up[1m]) >= " + str(times))
        return len(got) == 2 and all(r["value"][1] != "0" for r in prom.query("up"))

    # The error counters are scraped at 0 before the failure, so increase() sees it.
    wait_until(lambda: scraped(2), 30, lambda: prom.log.read_text()[-3000:], interval=0.2)
    pool.produce("dash-app", count=600, group_size=100, prefix="d").wait()
    pool.produce("dash-audit", count=300, group_size=100, prefix="a").wait()
    pool.produce("dash-lake", count=300, group_size=100, prefix="l").wait()
    pool.produce("dash-push", count=300, group_size=100, prefix="p").wait()
    pool.produce("dash-rows", count=300, group_size=100, prefix="r").wait()

    def dead_lettered() -> bool:
        return bool(prom.query('loghubd_dead_lettered_batches_total{source="app"} > 0'))

    wait_until(dead_lettered, 60, daemon.log_tail, interval=0.2)
    for sunk in (
        'loghubd_parquet_written_rows_total{source="lake"} >= 300',
        'loghubd_http_delivered_logs_total{source="push"} >= 300',
        'loghubd_postgres_written_rows_total{source="rows"} >= 300',
    ):
        wait_until(lambda q=sunk: bool(prom.query(q)), 60, daemon.log_tail, interval=0.2)
    wait_until(lambda: scraped(5), 30, interval=0.2)
    # Series born with the batches (the process-duration histogram) need two samples for
    # rate(): wait until every target was scraped twice more after the dead letter was seen.
    done_at = time.time()

    def scraped_since(t: float) -> bool:
        stamps = prom.query("timestamp(up)")
        return len(stamps) == 2 and all(float(r["value"][1]) > t for r in stamps)

    wait_until(lambda: scraped_since(done_at + 2.5), 30, interval=0.2)

    # The spark plugin's targets need a JVM: its end-to-end test checks them the same way.
    spark = [expr for _title, expr in panel_queries() if spark_query(expr)]
    assert spark, "the dashboard lost its spark targets (or spark_query does not find them)"
    empty = [
        f"{title}: {expr}"
        for title, expr in panel_queries()
        if not spark_query(expr) and not prom.query(expand(expr))
    ]
    assert not empty, "panels without data:\n" + "\n".join(empty)

    values = {name: prom.query(expand(q)) for name, q in variable_queries().items()}
    assert {r["metric"]["source"] for r in values["source"]} == SOURCES
    assert {r["metric"]["instance"] for r in values["instance"]} == {f"127.0.0.1:{daemon.ops_port}"}
    assert values["serve_instance"], values

    # The error panel during the incident: one series per counter and source, no
    # "same labelset" error, and the failure shows.
    (errors_panel,) = [
        expr for title, expr in panel_queries() if title.startswith("Processor errors, retries")
    ][:1]
    errors = prom.query(expand(errors_panel))
    assert {r["metric"]["source"] for r in errors} == SOURCES
    assert float(next(r for r in errors if r["metric"]["source"] == "app")["value"][1]) > 0

    # The sink panels show the sinks at work, each for its own source.
    output = {
        title: prom.query(expand(expr))
        for title, expr in panel_queries()
        if title.startswith("Sink output")
    }
    rates = {
        (t[-2], r["metric"]["source"]): float(r["value"][1]) for t, rs in output.items() for r in rs
    }
    assert rates.get(("A", "lake"), 0) > 0 and rates.get(("B", "push"), 0) > 0, rates
    assert rates.get(("C", "rows"), 0) > 0, rates

    promtool_check_metrics(f"http://127.0.0.1:{daemon.ops_port}/metrics")
    promtool_check_metrics(f"{loghubd_server.endpoint}/metrics")
