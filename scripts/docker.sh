#!/usr/bin/env bash
# Makes sure a Docker engine answers: installs docker.io when dockerd is
# missing and starts dockerd when nothing answers. Idempotent and fast when
# the engine already runs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"

if docker info >/dev/null 2>&1; then
  exit 0
fi
if ! command -v dockerd >/dev/null 2>&1; then
  step "installing docker.io"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends docker.io >/dev/null
fi
mkdir -p "$PILLAR_CACHE"
step "starting dockerd (log: $PILLAR_CACHE/dockerd.log)"
as_root setsid nohup dockerd >"$PILLAR_CACHE/dockerd.log" 2>&1 </dev/null &
for _ in $(seq 1 60); do
  docker info >/dev/null 2>&1 && { note "engine ready: $(docker info --format '{{.ServerVersion}} {{.Driver}}' 2>/dev/null)"; exit 0; }
  sleep 1
done
tail -20 "$PILLAR_CACHE/dockerd.log" >&2
die "dockerd did not answer within 60s"
