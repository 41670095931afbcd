#!/usr/bin/env bash
# Pin the Dockerfile's base image to the digest the registry serves today for TAG (default
# python:3.11-slim-bookworm): prints it and rewrites both FROM lines. Needs network and one
# of `docker buildx`, `skopeo` or `crane`. Review the diff and rebuild after running it.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
tag=${1:-python:3.11-slim-bookworm}
if command -v docker >/dev/null 2>&1 && docker buildx version >/dev/null 2>&1; then
  digest=$(docker buildx imagetools inspect "$tag" | awk '$1 == "Digest:" {print $2; exit}')
elif command -v skopeo >/dev/null 2>&1; then
  digest=$(skopeo inspect --format '{{.Digest}}' "docker://docker.io/library/$tag")
elif command -v crane >/dev/null 2>&1; then
  digest=$(crane digest "$tag")
else
  echo "base-image-digest: needs docker buildx, skopeo or crane" >&2
  exit 1
fi
[[ $digest == sha256:* ]] || { echo "base-image-digest: unexpected digest '$digest'" >&2; exit 1; }
echo "$tag@$digest"
sed -i -E "s|^FROM python:[^ ]+|FROM $tag@$digest|" "$here/Dockerfile"
