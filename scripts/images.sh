#!/usr/bin/env bash
# Builds the project's container images without any registry:
#   pillar/debian-base   debootstrap (bookworm, minbase) + docker import
#   pillar/postgres      the base plus postgresql-15, initialised on first start
#   pillar/proxy, pillar/sim   FROM scratch with the static binaries
# Every image is tagged by a hash of what it is made of (skipped when it
# exists) and with a stable local tag the tests use (…:local, …:15-local).
#   scripts/images.sh [--print-tags]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
bash scripts/docker.sh

cache=$PILLAR_CACHE/images
mkdir -p "$cache"
mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
[ -n "$mirror" ] || mirror=$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list 2>/dev/null)
[ -n "$mirror" ] || mirror=http://deb.debian.org/debian
suite=bookworm
hashof() { sha256sum | cut -c1-12; }
exists() { docker image inspect "$1" >/dev/null 2>&1; }
timed() { local t0=$SECONDS; "$@"; note "done in $((SECONDS - t0))s"; }

# ---- debian base ----------------------------------------------------------
base_hash=$(printf "debootstrap --variant=minbase %s v2\n" "$suite" | hashof)
base_tar=$cache/debian-base-$base_hash.tar
if [ ! -f "$base_tar" ]; then
  command -v debootstrap >/dev/null || { as_root apt-get update -qq; DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq debootstrap >/dev/null; }
  step "debootstrap $suite (minbase) from $mirror"
  root=$(mktemp -d); chmod 0755 "$root"
  timed as_root debootstrap --variant=minbase "$suite" "$root" "$mirror" >"$cache/debootstrap.log" 2>&1 || { tail -20 "$cache/debootstrap.log" >&2; die "debootstrap failed"; }
  as_root rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  as_root chmod 0755 "$root"
  as_root tar -C "$root" -cf "$base_tar.tmp" . && mv "$base_tar.tmp" "$base_tar"
  as_root rm -rf "$root"
fi
if ! exists "pillar/debian-base:$base_hash"; then
  step "docker import pillar/debian-base:$base_hash"
  docker import "$base_tar" "pillar/debian-base:$base_hash" >/dev/null
fi
docker tag "pillar/debian-base:$base_hash" pillar/debian-base:local

# ---- postgres -------------------------------------------------------------
pg_hash=$(cat scripts/images/pg-entrypoint.sh | { cat; echo "$base_hash postgresql-15"; } | hashof)
pg_tar=$cache/postgres-$pg_hash.tar
if [ ! -f "$pg_tar" ]; then
  step "installing postgresql-15 into a copy of the base"
  root=$(mktemp -d); chmod 0755 "$root"
  as_root tar -C "$root" -xf "$base_tar"
  as_root cp /etc/resolv.conf "$root/etc/resolv.conf"
  echo "deb $mirror $suite main" | as_root tee "$root/etc/apt/sources.list" >/dev/null
  # Only binaries go into the image: the cluster is made by the entrypoint.
  as_root mkdir -p "$root/etc/postgresql-common"
  echo "create_main_cluster = false" | as_root tee "$root/etc/postgresql-common/createcluster.conf" >/dev/null
  as_root mount -t proc proc "$root/proc"
  trap 'as_root umount "$root/proc" 2>/dev/null || true' EXIT
  timed as_root chroot "$root" sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql-15 >/dev/null && apt-get clean && rm -rf /var/lib/apt/lists/*' \
    || die "installing postgresql-15 in the image root failed"
  as_root umount "$root/proc"; trap - EXIT
  as_root install -m 0755 scripts/images/pg-entrypoint.sh "$root/usr/local/bin/pg-entrypoint"
  as_root rm -rf "$root/var/lib/postgresql/15/main" "$root/etc/resolv.conf"
  as_root chmod 0755 "$root"
  as_root tar -C "$root" -cf "$pg_tar.tmp" . && mv "$pg_tar.tmp" "$pg_tar"
  as_root rm -rf "$root"
fi
if ! exists "pillar/postgres:15-$pg_hash"; then
  step "docker import pillar/postgres:15-$pg_hash"
  docker import --change 'ENTRYPOINT ["/usr/local/bin/pg-entrypoint"]' --change 'EXPOSE 5432' \
    --change 'ENV LANG=C.UTF-8' "$pg_tar" "pillar/postgres:15-$pg_hash" >/dev/null
fi
docker tag "pillar/postgres:15-$pg_hash" pillar/postgres:15-local

# ---- scratch images of the binaries ---------------------------------------
build_scratch() { # name package
  local name=$1 pkg=$2 ctx
  ctx=$(mktemp -d)
  CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$ctx/$name" "$pkg"
  mkdir -p "$ctx/tmp"
  printf 'FROM scratch\nCOPY %s /%s\nCOPY tmp /tmp\nENTRYPOINT ["/%s"]\n' "$name" "$name" "$name" > "$ctx/Dockerfile"
  local h
  h=$(cat "$ctx/$name" "$ctx/Dockerfile" | hashof)
  if exists "pillar/$name:$h"; then
    note "pillar/$name:$h cached"
  else
    step "docker build pillar/$name:$h"
    DOCKER_BUILDKIT=0 docker build -q -t "pillar/$name:$h" "$ctx" >/dev/null 2>"$ctx.log" || { cat "$ctx.log" >&2; die "docker build pillar/$name failed"; }
    rm -f "$ctx.log"
  fi
  docker tag "pillar/$name:$h" "pillar/$name:local"
  rm -rf "$ctx"
}
build_scratch proxy ./impl/cmd/proxy
build_scratch sim ./sim/cmd/sim

if [ "${1:-}" = --print-tags ]; then
  echo "DEBIAN_BASE=pillar/debian-base:local"
  echo "POSTGRES=pillar/postgres:15-local"
  echo "PROXY=pillar/proxy:local"
  echo "SIM=pillar/sim:local"
fi
step "images ready"
