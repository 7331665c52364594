#!/usr/bin/env bash
# Makes sure a local Docker engine answers `docker info`. Idempotent and fast
# when one already runs; otherwise installs docker.io (when dockerd is missing)
# and starts dockerd in the background, logging to $PILLAR_CACHE/dockerd.log.
# No registry is ever contacted: images come from scripts/images.sh.
#   PILLAR_DOCKER_TIMEOUT  seconds to wait for a starting engine (default 60)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"

timeout_s=${PILLAR_DOCKER_TIMEOUT:-60}
log=$PILLAR_CACHE/dockerd.log
data_root=/var/lib/docker
daemon_json=/etc/docker/daemon.json

engine_up() { timeout 15 docker info >/dev/null 2>&1; }
engine_desc() { docker info -f 'server {{.ServerVersion}}, storage driver {{.Driver}}' 2>/dev/null; }
# say notes a line both on stderr and in the daemon log, so the log tells
# later readers which choices this script made.
say() { note "$*"; printf '%s docker.sh: %s\n' "$(date -u +%FT%TZ)" "$*" >>"$log"; }

if command -v docker >/dev/null && engine_up; then
  note "Docker engine answers ($(engine_desc))"
  exit 0
fi
if [ -n "${DOCKER_HOST:-}" ] && [ "$DOCKER_HOST" != unix:///var/run/docker.sock ] && [ "$DOCKER_HOST" != unix:///run/docker.sock ]; then
  die "DOCKER_HOST=$DOCKER_HOST does not answer; unset it to use a local engine started by this script"
fi
mkdir -p "$PILLAR_CACHE"

if ! command -v dockerd >/dev/null || ! command -v docker >/dev/null; then
  step "installing docker.io with apt-get"
  # The package's maintainer scripts would start the daemon on their own terms;
  # a temporary policy-rc.d forbids that so this script starts it below.
  policy=/usr/sbin/policy-rc.d
  added_policy=
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | as_root tee "$policy" >/dev/null
    as_root chmod 755 "$policy"
    added_policy=1
  fi
  rc=0
  { as_root apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends docker.io >/dev/null; } || rc=$?
  [ -z "$added_policy" ] || as_root rm -f "$policy"
  [ "$rc" = 0 ] || die "apt-get install docker.io failed (exit $rc)"
  command -v dockerd >/dev/null || die "docker.io installed but dockerd is not on PATH"
  engine_up && { note "Docker engine answers ($(engine_desc))"; exit 0; }
fi

# A daemon that is still starting (another run of this script, or a slow boot)
# must not get a twin: both would fight over the same pidfile and data root.
if pgrep -x dockerd >/dev/null; then
  step "dockerd is running but not answering yet; waiting up to ${timeout_s}s"
  for _ in $(seq "$timeout_s"); do engine_up && { note "Docker engine answers ($(engine_desc))"; exit 0; }; sleep 1; done
  die "dockerd (pid $(pgrep -x dockerd | tr '\n' ' ')) runs but \`docker info\` fails after ${timeout_s}s; see $log"
fi

step "starting dockerd (log: $log)"
say "---- starting dockerd"
# Flags that also appear in daemon.json make dockerd refuse to start, so an
# operator's explicit choice there wins over what is probed here.
in_json() { [ -f "$daemon_json" ] && grep -q "\"$1\"" "$daemon_json"; }
args=()

# runc needs cgroups; some minimal VMs boot without any hierarchy mounted.
if [ -d /sys/fs/cgroup ] && [ -z "$(ls -A /sys/fs/cgroup 2>/dev/null)" ]; then
  if as_root mount -t cgroup2 none /sys/fs/cgroup; then
    say "mounted cgroup2 on /sys/fs/cgroup (it was empty)"
  else
    say "warning: /sys/fs/cgroup is empty and mounting cgroup2 failed; containers may not start"
  fi
fi

# iptables: dockerd runs whatever `iptables` is first on PATH. Debian points it
# at the nf_tables backend; kernels without nf_tables need the legacy one, and
# kernels with neither still serve published loopback ports via docker-proxy.
shim=$PILLAR_CACHE/dockerd-bin
dockerd_path=$PATH
ipt_ok() { command -v "$1" >/dev/null && as_root "$1" -w -t nat -nL >/dev/null 2>&1; }
if in_json iptables; then
  say "iptables: as set in $daemon_json"
elif ipt_ok iptables; then
  say "iptables: $(iptables --version 2>/dev/null)"
elif ipt_ok iptables-legacy; then
  mkdir -p "$shim"
  for t in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
    if command -v "$t-legacy" >/dev/null; then ln -sf "$(command -v "$t-legacy")" "$shim/$t"; fi
  done
  dockerd_path=$shim:$PATH
  say "iptables: the default backend fails here; using iptables-legacy through $shim"
else
  args+=(--iptables=false --ip6tables=false)
  say "iptables: no working backend; starting with --iptables=false (published ports go through docker-proxy)"
fi

# Storage: overlay2 unless an overlay mount fails on the data root's filesystem
# (e.g. when that filesystem is itself an overlay); then vfs, which is slow and
# large but works everywhere.
overlay_works() {
  local parent=$data_root probe rc=0
  [ -d "$parent" ] || parent=$(dirname "$data_root")
  probe=$(as_root mktemp -d "$parent/.pillar-overlay-probe.XXXXXX")
  as_root mkdir -p "$probe/lower" "$probe/upper" "$probe/work" "$probe/merged"
  as_root mount -t overlay overlay -o "lowerdir=$probe/lower,upperdir=$probe/upper,workdir=$probe/work" "$probe/merged" 2>/dev/null || rc=1
  [ "$rc" != 0 ] || as_root umount "$probe/merged"
  as_root rm -rf "$probe"
  return "$rc"
}
driver=default
if in_json storage-driver; then
  say "storage driver: as set in $daemon_json"
elif overlay_works; then
  say "storage driver: default (an overlay mount works where $data_root lives)"
else
  driver=vfs
  say "storage driver: vfs (an overlay mount fails where $data_root lives)"
fi

pid=
start() {
  local extra=()
  [ "$driver" != vfs ] || extra=(--storage-driver=vfs)
  # setsid detaches the daemon from this script's process group and terminal,
  # so it outlives the script (and CI steps that kill their job's group).
  PATH=$dockerd_path setsid dockerd "${args[@]}" "${extra[@]}" </dev/null >>"$log" 2>&1 &
  pid=$!
  say "dockerd pid $pid: dockerd ${args[*]} ${extra[*]}"
}
# wait_up returns 0 when the engine answers, 1 when dockerd exited, 2 on timeout.
wait_up() {
  local deadline=$((SECONDS + timeout_s))
  while [ "$SECONDS" -lt "$deadline" ]; do
    engine_up && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.5
  done
  return 2
}

start
rc=0; wait_up || rc=$?
if [ "$rc" = 1 ] && [ "$driver" = default ] && ! in_json storage-driver &&
  tail -n 40 "$log" | grep -qiE 'overlay|graphdriver|storage.driver'; then
  driver=vfs
  say "storage driver: dockerd exited with an overlay/graphdriver error; retrying with vfs"
  start
  rc=0; wait_up || rc=$?
fi
case $rc in
  0) ;;
  1) tail -n 25 "$log" >&2; die "dockerd exited during start-up; full log: $log" ;;
  *) tail -n 25 "$log" >&2; die "dockerd (pid $pid) did not answer \`docker info\` within ${timeout_s}s; full log: $log" ;;
esac
say "engine answers: $(engine_desc)"
