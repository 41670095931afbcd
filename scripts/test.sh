#!/usr/bin/env bash
# The whole test suite: lint, type check, then every test (unit, property-based, end to end
# with real processes). Extra arguments go to pytest.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/scripts/bootstrap.sh"
cd "$here"
bin="$here/.venv/bin"
"$bin/ruff" check loghubd tests bench plugins
"$bin/ruff" format --check loghubd tests bench plugins
"$bin/mypy"
exec "$bin/python" -m pytest -q "$@"
