#!/usr/bin/env bash
# The whole test suite: lint, type check, then every test (unit, property-based, end to end
# with real processes). Extra arguments go to pytest.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/scripts/bootstrap.sh"
cd "$here"
# Debian packages whose real tools some tests drive (COMMAND:PACKAGE, installed when missing).
# The systemd unit is verified with systemd-analyze; Prometheus (prometheus, promtool) checks
# the alert rules and runs the Grafana dashboard's queries; the postgres processor's tests run
# a real PostgreSQL server (Debian's binaries, outside PATH); the web console is driven in a
# real headless chromium; the http processor's TLS tests make their certificates with openssl.
"$here/scripts/debs.sh" systemd-analyze:systemd promtool:prometheus \
  "/usr/lib/postgresql/*/bin/postgres:postgresql" \
  chromium:chromium openssl:openssl
bin="$here/.venv/bin"
# The Spark driver JVMs' class-data sharing archive is made in the background while the checks
# below run (tests/spark_cds.py; the suite's controller adopts the maker).
"$bin/python" -m tests.spark_cds
"$bin/ruff" check loghubd tests bench plugins scripts conftest.py
"$bin/ruff" format --check loghubd tests bench plugins scripts conftest.py
"$bin/mypy"
"$bin/mypy" --config-file bench/mypy.ini bench/*.py
# Several workers (pytest-xdist): most tests wait on real processes rather than compute. The
# Spark tests and the reliability runs each stay together on one worker (conftest.py
# schedules them).
# LOGHUBD_TEST_WORKERS=0 runs everything in this process. A skipped test fails here, with its
# reason (conftest.py): every check must run where the suite is the gate.
export LOGHUBD_SKIPS_FAIL="${LOGHUBD_SKIPS_FAIL:-1}"
# The 25 slowest tests are listed at the end: where the suite's time goes, run after run.
exec "$bin/python" -m pytest -q --durations=25 -n "${LOGHUBD_TEST_WORKERS:-4}" "$@"
