#!/usr/bin/env bash
# The main job on the embedded default: local service + sample data + the daemon consuming it.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/scripts/bootstrap.sh"
exec "$here/.venv/bin/python" "$here/scripts/demo.py" "$@"
