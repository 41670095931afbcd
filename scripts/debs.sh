#!/usr/bin/env bash
# Install the Debian packages that some tests need (the real tools, not stand-ins), once.
# Each argument is COMMAND:PACKAGE; the package is installed when COMMAND is not on PATH.
# Needs root and apt-get (as on a fresh machine and in CI); elsewhere it says what is missing
# and the tests that need it fail loudly, naming the tool.
set -euo pipefail
missing=()
for spec in "$@"; do
  cmd=${spec%%:*}
  pkg=${spec#*:}
  # Some tools live outside PATH (PostgreSQL's server binaries): COMMAND may be an absolute glob.
  if [[ $cmd == /* ]]; then
    compgen -G "$cmd" >/dev/null && continue
  elif command -v "$cmd" >/dev/null 2>&1; then
    continue
  fi
  missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "debs: cannot install ${missing[*]} (needs root and apt-get); the tests that need them will fail" >&2
  exit 0
fi
echo "debs: installing ${missing[*]}" >&2
# Several installs may run at once on a developer machine: wait for dpkg's lock.
apt_opts=(-o DPkg::Lock::Timeout=600 -qq)
apt-get "${apt_opts[@]}" update >/dev/null
DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" install -y --no-install-recommends "${missing[@]}" >/dev/null
