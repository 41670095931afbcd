#!/usr/bin/env bash
# Create or update the checkout's virtualenv (.venv) so that it holds loghubd, its first-party
# plugins and the test tools. Idempotent and cheap when nothing changed: the install step runs
# only when a packaging file is newer than the last successful install.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
venv="$here/.venv"
python=${PYTHON:-python3.11}
command -v "$python" >/dev/null 2>&1 || python=python3

if [ ! -x "$venv/bin/python" ]; then
  echo "bootstrap: creating $venv with $($python --version)" >&2
  "$python" -m venv "$venv"
fi

stamp="$venv/.loghubd-installed"
# Every file whose change means the environment must be rebuilt.
# The C extension is compiled at install time: a change to its source needs a new install.
inputs=("$here/pyproject.toml" "$here/setup.py" "$here/scripts/bootstrap.sh" "$here/loghubd/_fastlog.c"
  "$here/loghubd/_fastjsonl.c" "$here/loghubd/_fastarrow.c" "$here/loghubd/_fastlz4.c"
  "$here/loghubd/_wire.h")
while IFS= read -r f; do inputs+=("$f"); done < <(find "$here/plugins" -maxdepth 2 -name pyproject.toml 2>/dev/null | sort)

needs_install=0
[ -f "$stamp" ] || needs_install=1
for f in "${inputs[@]}"; do
  [ "$f" -nt "$stamp" ] 2>/dev/null && needs_install=1
done

if [ "$needs_install" = 1 ]; then
  echo "bootstrap: installing loghubd and its plugins into $venv" >&2
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip >&2
  args=(-e "$here[test,dev]")
  for p in "$here"/plugins/*/; do
    [ -f "$p/pyproject.toml" ] && args+=(-e "$p")
  done
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "${args[@]}" >&2
  touch "$stamp"
fi

# Bytecode of the checkout's own modules, as a wheel install has it (pip compiles at install
# time). The editable install runs from source: where PYTHONDONTWRITEBYTECODE is set (some CI
# images, this project's build machines), every daemon and serve a test or the demo starts
# would otherwise compile ~80 modules again (~0.1 s of CPU each). Up-to-date files are skipped.
"$venv/bin/python" -m compileall -q -j 0 "$here/loghubd" "$here"/plugins/*/loghubd_* >/dev/null
