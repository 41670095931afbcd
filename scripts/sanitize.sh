#!/usr/bin/env bash
# The C extensions under AddressSanitizer and UndefinedBehaviorSanitizer: each is rebuilt with
# -fsanitize=address,undefined into a copy of the loghubd package, and the equality, fuzz and
# property tests of its C paths run against that copy (any sanitizer report aborts the run).
#
#   scripts/sanitize.sh [pytest args...]      e.g. HYPOTHESIS_PROFILE is not needed: the
#                                             tests' own example counts apply
# Needs gcc with libasan/libubsan (Debian: gcc). Exit code: pytest's.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
py="$here/.venv/bin/python"
include=$("$py" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
suffix=$("$py" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
asan=$(gcc -print-file-name=libasan.so)
[ -e "$asan" ] || { echo "sanitize.sh: gcc's libasan.so not found (install gcc)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$here/loghubd" "$work/loghubd"
rm -f "$work"/loghubd/*.so
for m in _fastlog _fastjsonl _fastarrow _fastlz4; do
  gcc -shared -fPIC -g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined \
    -fno-sanitize-recover=undefined -I"$include" "$here/loghubd/$m.c" -o "$work/loghubd/$m$suffix"
done
cd "$here"
# loghubd is installed editable: its finder would import the checkout, not the copy, so it is
# dropped (the plugins' finders stay). Python's allocator and interned objects look like leaks
# to LeakSanitizer: leaks are not checked.
LD_PRELOAD="$asan" ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
  UBSAN_OPTIONS=print_stacktrace=1 "$py" - "$work" "$@" <<'PY'
import sys

work, args = sys.argv[1], sys.argv[2:]
sys.meta_path = [
    f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable___loghubd_0")
]
sys.path[:0] = [work, "."]
import loghubd  # noqa: E402

assert loghubd.__file__.startswith(work), loghubd.__file__
import pytest  # noqa: E402

tests = ["tests/unit/test_fastlog.py", "tests/unit/test_fastjsonl.py",
         "tests/unit/test_fastarrow.py", "tests/unit/test_arrow_view.py",
         "tests/unit/test_fastlz4.py", "tests/unit/test_wire_forms.py"]
opts = ["-q", "-p", "no:cacheprovider"]
# loghubd was imported above (to check which one): its pytest plugin cannot be rewritten
opts += ["-W", "ignore::pytest.PytestAssertRewriteWarning"]
sys.exit(pytest.main([*opts, *tests, *args]))
PY
