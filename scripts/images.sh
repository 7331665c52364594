#!/usr/bin/env bash
# Builds the project's container images without any registry:
#   pillar/debian-base   debootstrap (bookworm, minbase) + docker import
#   pillar/postgres      the base plus postgresql-15, initialised on first start
#   pillar/storage-base  the base plus LVM, ZFS userland, nvme-cli, mkfs, busybox
#   pillar/proxy, pillar/sim, pillar/pillar-controller   FROM scratch
#   pillar/pillar-agent, pillar/pillar-node   the storage base plus the binary
#   pillar/pillar-agent-sim, pillar/pillar-node-sim   the same with the
#                        simulators (conformance/cmd; the kind e2e runs them)
#   pillar/busybox       Debian's static busybox (the charts' init image)
# Every image is tagged by a hash of what it is made of (skipped when it
# exists) and with a stable local tag the tests use (…:local, …:15-local).
#   scripts/images.sh [--print-tags]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
bash scripts/docker.sh

source scripts/debian.sh

if ! exists "pillar/debian-base:$base_hash"; then
  step "docker import pillar/debian-base:$base_hash"
  docker import "$base_tar" "pillar/debian-base:$base_hash" >/dev/null
fi
docker tag "pillar/debian-base:$base_hash" pillar/debian-base:local

# ---- postgres -------------------------------------------------------------
pg_hash=$( { cat scripts/images/pg-entrypoint.sh; echo "$base_hash postgresql-15"; } | hashof)
pg_tar=$cache/postgres-$pg_hash.tar
# Only binaries go into the image: the cluster is made by the entrypoint.
pg_prep() {
  as_root mkdir -p "$1/etc/postgresql-common"
  echo "create_main_cluster = false" | as_root tee "$1/etc/postgresql-common/createcluster.conf" >/dev/null
}
pg_finish() {
  as_root install -m 0755 scripts/images/pg-entrypoint.sh "$1/usr/local/bin/pg-entrypoint"
  as_root rm -rf "$1/var/lib/postgresql/15/main"
}
if [ ! -f "$pg_tar" ]; then
  step "installing postgresql-15 into a copy of the base"
  apt_root_tar "$pg_tar" main postgresql-15 pg_prep pg_finish
fi
if ! exists "pillar/postgres:15-$pg_hash"; then
  step "docker import pillar/postgres:15-$pg_hash"
  docker import --change 'ENTRYPOINT ["/usr/local/bin/pg-entrypoint"]' --change 'EXPOSE 5432' \
    --change 'ENV LANG=C.UTF-8' "$pg_tar" "pillar/postgres:15-$pg_hash" >/dev/null
fi
docker tag "pillar/postgres:15-$pg_hash" pillar/postgres:15-local

# ---- storage tools (base of the agent and node images) --------------------
# What the agent (LVM, ZFS userland, nvmet through configfs) and the node
# (nvme-cli, mkfs, mount, resize, losetup for the loop connector) run.
storage_pkgs="lvm2 thin-provisioning-tools zfsutils-linux nvme-cli e2fsprogs xfsprogs util-linux mount kmod udev busybox-static ca-certificates"
st_hash=$(echo "$base_hash $storage_pkgs contrib v2-no-nvme-identity" | hashof)
st_tar=$cache/storage-base-$st_hash.tar
# nvme-cli's install writes /etc/nvme/hostnqn and hostid into the image:
# every node would present that one identity and the per-host ACL would
# separate nothing. The node takes the host's (its /etc/nvme is mounted,
# and the node writes one there at first start when the host has none).
st_finish() { as_root rm -f "$1/etc/nvme/hostnqn" "$1/etc/nvme/hostid"; }
if [ ! -f "$st_tar" ]; then
  step "installing the storage tools into a copy of the base"
  apt_root_tar "$st_tar" "main contrib" "$storage_pkgs" "" st_finish
fi
if ! exists "pillar/storage-base:$st_hash"; then
  step "docker import pillar/storage-base:$st_hash"
  docker import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' "$st_tar" "pillar/storage-base:$st_hash" >/dev/null
fi
docker tag "pillar/storage-base:$st_hash" pillar/storage-base:local

# ---- images of the binaries ----------------------------------------------
# build_image NAME PACKAGE FROM [TAG...]: the static binary on FROM (scratch
# or a local base), tagged by content and with each TAG (the charts'
# default references, so they render unchanged in the kind e2e).
build_image() {
  local name=$1 pkg=$2 from=$3 ctx h
  shift 3
  ctx=$(mktemp -d)
  CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.Version=$VERSION $pillar_version" -o "$ctx/$name" "$pkg"
  mkdir -p "$ctx/tmp"
  printf 'FROM %s\nCOPY %s /usr/local/bin/%s\nCOPY tmp /tmp\nENTRYPOINT ["/usr/local/bin/%s"]\n' "$from" "$name" "$name" "$name" > "$ctx/Dockerfile"
  [ "$from" = scratch ] && sed -i "s|/usr/local/bin/$name|/$name|g" "$ctx/Dockerfile"
  h=$( { cat "$ctx/$name" "$ctx/Dockerfile"; docker image inspect -f '{{.Id}}' "$from" 2>/dev/null || true; } | hashof)
  if exists "pillar/$name:$h"; then
    note "pillar/$name:$h cached"
  else
    step "docker build pillar/$name:$h"
    DOCKER_BUILDKIT=0 docker build -q -t "pillar/$name:$h" "$ctx" >/dev/null 2>"$ctx.log" || { cat "$ctx.log" >&2; die "docker build pillar/$name failed"; }
    rm -f "$ctx.log"
  fi
  docker tag "pillar/$name:$h" "pillar/$name:local"
  local t
  for t in "$@"; do docker tag "pillar/$name:$h" "$t"; done
  rm -rf "$ctx"
}
VERSION=$(git describe --always --dirty 2>/dev/null || echo dev)
# The pillar binaries' Main reads the Version of its product package.
pillar_pkg=github.com/pillarhq/pillar/impl/pillar
pillar_version="-X $pillar_pkg/agent.Version=$VERSION -X $pillar_pkg/controller.Version=$VERSION -X $pillar_pkg/csinode.Version=$VERSION"
csi_version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/pillar-csi/Chart.yaml)
proxy_version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/proxy/Chart.yaml)
build_image proxy ./impl/cmd/proxy scratch "ghcr.io/pillarhq/pillar/proxy:$proxy_version"
build_image sim ./sim/cmd/sim scratch
build_image pillar-controller ./impl/cmd/pillar-controller scratch "ghcr.io/pillarhq/pillar-csi/controller:$csi_version"
build_image pillar-agent ./impl/cmd/pillar-agent pillar/storage-base:local "ghcr.io/pillarhq/pillar-csi/agent:$csi_version"
build_image pillar-node ./impl/cmd/pillar-node pillar/storage-base:local "ghcr.io/pillarhq/pillar-csi/node:$csi_version"
build_image pillar-agent-sim ./conformance/cmd/pillar-agent-sim pillar/storage-base:local
build_image pillar-node-sim ./conformance/cmd/pillar-node-sim pillar/storage-base:local

# ---- busybox ----------------------------------------------------------------
# The charts' module-loading init containers name docker.io/library/busybox;
# offline, that reference is Debian's static busybox with its applets linked.
bb_ctx=$(mktemp -d)
as_root tar -C "$bb_ctx" -xf "$st_tar" ./usr/bin/busybox
mkdir -p "$bb_ctx/root/bin" "$bb_ctx/root/tmp"
mv "$bb_ctx/usr/bin/busybox" "$bb_ctx/root/bin/busybox"
for a in $("$bb_ctx/root/bin/busybox" --list); do [ "$a" = busybox ] || ln -s busybox "$bb_ctx/root/bin/$a"; done
printf 'FROM scratch\nCOPY root /\nENV PATH=/bin\nCMD ["sh"]\n' >"$bb_ctx/Dockerfile"
bb_hash=$(cat "$bb_ctx/root/bin/busybox" "$bb_ctx/Dockerfile" | hashof)
if ! exists "pillar/busybox:$bb_hash"; then
  step "docker build pillar/busybox:$bb_hash"
  DOCKER_BUILDKIT=0 docker build -q -t "pillar/busybox:$bb_hash" "$bb_ctx" >/dev/null 2>&1 || die "docker build pillar/busybox failed"
fi
docker tag "pillar/busybox:$bb_hash" pillar/busybox:local
docker tag "pillar/busybox:$bb_hash" docker.io/library/busybox:1.38.0
rm -rf "$bb_ctx"

if [ "${1:-}" = --print-tags ]; then
  echo "DEBIAN_BASE=pillar/debian-base:local"
  echo "POSTGRES=pillar/postgres:15-local"
  echo "PROXY=pillar/proxy:local"
  echo "SIM=pillar/sim:local"
  echo "PILLAR_AGENT=pillar/pillar-agent:local"
  echo "PILLAR_CONTROLLER=pillar/pillar-controller:local"
  echo "PILLAR_NODE=pillar/pillar-node:local"
  echo "PILLAR_AGENT_SIM=pillar/pillar-agent-sim:local"
  echo "PILLAR_NODE_SIM=pillar/pillar-node-sim:local"
  echo "BUSYBOX=pillar/busybox:local"
fi
step "images ready"
