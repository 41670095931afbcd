"""How the suite is spread over pytest-xdist workers (scripts/test.sh runs `-n 4`).

Most tests wait on real processes (heartbeats, timeouts, fsyncs) far more than they use the
CPU, so each goes to whichever worker is free. Some families stay together, each on one
worker, in collection order:

- `spark`, `spark-e2e`: the plugin's tests share ONE SparkSession per worker (a JVM of ~400
  MiB that takes seconds to start); the end-to-end daemons (`spark-e2e`, 9-11 minutes) start
  JVMs of their own and read their output back through their worker's session, beside the
  rest of the plugin's tests on another worker (`spark`);
- `spark-cli`: `loghubd-spark stream` failure runs, a JVM of their own per case;
- `reliability`: the chaos, fault-proxy and fuzz runs apply faults on a wall-clock schedule
  and check recovery times; two of them side by side would measure each other;
- `console`: the browser tests share ONE headless Chromium and one `loghubd serve` per
  worker (session fixtures in tests/console/conftest.py).

The groups are handed out first (GROUP_ORDER): the suite's wall time is at least its longest
group's, so the long ones must start at once.

This is a scheduler of our own rather than `--dist loadgroup` with `xdist_group` marks:
pytest-xdist 3.8 tags grouped tests by rewriting `Item._nodeid`, which pytest 9.2 no longer
reads, so the marks are silently ignored there.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

GROUPS = {  # the first prefix that matches wins
    # Its own JVM in a subprocess per case, no shared session: beside the `spark` group.
    "plugins/loghubd-spark/tests/test_stream_cli.py": "spark-cli",
    "plugins/loghubd-spark/tests/test_spark_archive.py": "spark-cli",
    "plugins/loghubd-spark/tests/test_spark_e2e.py": "spark-e2e",
    "plugins/loghubd-spark/tests/": "spark",
    "tests/reliability/": "reliability",
    "tests/console/": "console",
}


# Handed out in this order; the first four start at once on the four workers, so the order
# matters only for `console`, which goes to the first worker nearly through its group.
# Minutes in two CI runs on 2026-11-29 (the machine at its slow phase): spark 11.4-14.5,
# spark-e2e 8.7-11.4, spark-cli 5.2-8.5, reliability 6.2-7.7, console ~1. The suite is
# CPU-bound there (README: "Tests and benchmarks"), so each group's minutes stretch with the
# others'.
GROUP_ORDER = ("spark-e2e", "reliability", "spark", "spark-cli", "console")


def group_of(nodeid: str) -> str:
    """The scope a test is scheduled with: its group, or the test itself."""
    for prefix, group in GROUPS.items():
        if nodeid.startswith(prefix):
            return group
    return nodeid


try:
    from xdist.scheduler import LoadScopeScheduling
except ImportError:  # pragma: no cover - xdist is a test dependency
    pass
else:

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def __init__(self, config: Any, log: Any = None) -> None:
            super().__init__(config, log)
            # Hand scopes out in collection order (pytest_collection_modifyitems below puts
            # the groups first), not by their number of tests.
            config.option.loadscopereorder = False

        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    def pytest_xdist_make_scheduler(config: Any, log: Any) -> GroupScheduling:
        return GroupScheduling(config, log)


# Last in their group: they wait for what the run makes in the background (the Spark JVMs'
# class-data sharing archive, below).
LAST = ("plugins/loghubd-spark/tests/test_spark_archive.py",)


def pytest_collection_modifyitems(items: list[Any]) -> None:
    """The groups first, in GROUP_ORDER, then everything else; each keeps its own order (but
    LAST)."""

    def rank(item: Any) -> tuple[int, bool]:
        group = group_of(item.nodeid)
        order = GROUP_ORDER.index(group) if group in GROUP_ORDER else len(GROUP_ORDER)
        return order, item.nodeid.startswith(LAST)

    items.sort(key=rank)


# In-process runs of a command line (`loghubd.cli.main`, in the admin tests and the spark
# plugin's) must keep the test session's logging. `cli.main` configures structlog for the
# whole process, with loggers cached on first use on the stream of that moment: pytest's
# captured output, closed once the test ends. Every later test on that worker would then log
# into a closed file ("ValueError: I/O operation on closed file", unrelated failures that
# depend on which tests ran first). Tests that need the real set-up run the CLI in a
# subprocess (tests/integration/test_cli_errors.py).
@pytest.fixture(autouse=True)
def _keep_the_sessions_logging(monkeypatch: pytest.MonkeyPatch) -> None:
    from loghubd import logging as loghubd_logging

    monkeypatch.setattr(loghubd_logging, "configure", lambda *args, **kwargs: None)


# A skipped test is a check that did not run. scripts/test.sh (the README's test command, what
# CI runs) sets LOGHUBD_SKIPS_FAIL=1: there a skip (a missing tool, a C extension that did not
# build, a file system without `chattr`) fails with its reason instead of passing quietly. A
# developer's own `pytest` run keeps skips as skips.
def _skips_fail() -> bool:
    return os.environ.get("LOGHUBD_SKIPS_FAIL", "") not in ("", "0")


def _failed_for_skip(report: Any) -> None:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else longrepr
    report.outcome = "failed"
    report.longrepr = (
        f"skipped, and skips fail here (LOGHUBD_SKIPS_FAIL=1, scripts/test.sh): {reason}"
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: Any, call: Any) -> Any:
    outcome = yield
    report = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail") and _skips_fail():
        _failed_for_skip(report)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: Any) -> Any:
    outcome = yield
    report = outcome.get_result()
    if report.skipped and _skips_fail():  # a module-level importorskip
        _failed_for_skip(report)


# Property-based tests check behaviour, not speed: hypothesis's default 200 ms deadline per
# example turns a busy machine (4 workers on 2 cores, a JVM next door) into flaky failures.
# Speed is measured in bench/.
from hypothesis import settings as _hypothesis_settings  # noqa: E402

_hypothesis_settings.register_profile("loghubd", deadline=None)
_hypothesis_settings.load_profile("loghubd")


# Spark driver JVMs start with a class-data sharing archive made in the background
# (tests/spark_cds.py: by scripts/test.sh before its checks, else at the start of the run):
# about half their start-up. Set up by the controller only: xdist's workers inherit its
# environment.
_cds: dict[str, Any] = {}


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return
    from tests import spark_cds

    path = spark_cds.archive()
    if path is None:
        return  # no Java or pyspark: the Spark tests say so themselves
    _cds.update(path=path, maker=spark_cds.start(path))  # in the environment of before
    spark_cds.environ(os.environ, path)


def pytest_unconfigure(config: pytest.Config) -> None:
    maker = _cds.get("maker")
    if maker is not None:
        maker.stop()  # if the run ended first: made again next time


def pytest_terminal_summary(terminalreporter: Any) -> None:
    maker = _cds.get("maker")
    failure = maker.failure() if maker is not None else None
    if failure is not None:
        from tests import spark_cds

        terminalreporter.write_line(
            f"note: the Spark JVMs' class-data sharing archive could not be made ({failure}; "
            f"see {spark_cds.log_of(_cds['path'])}): they started without it, more slowly",
            yellow=True,
        )
