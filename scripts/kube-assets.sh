#!/usr/bin/env bash
# Builds etcd for envtest from the Go module proxy (no registry or GitHub
# needed) and takes kube-apiserver from the kind node's build, caches them by version under
# $PILLAR_CACHE/kube/<versions>, and prints that directory (use it as
# KUBEBUILDER_ASSETS). Cold: etcd in under a minute and kube-apiserver in a few
# (unless the node image built it first); warm: instant.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
# KUBE_VERSION, ETCD_VERSION: scripts/versions.env (loaded by lib.sh).
out="$PILLAR_CACHE/kube/kube-$KUBE_VERSION-etcd-$ETCD_VERSION"
# One build at a time: scripts/test.sh builds the kind node image, which
# needs etcd from here, beside the envtest step.
mkdir -p "$PILLAR_CACHE/kube"
exec 9>"$out.lock"
flock 9
if [ -x "$out/kube-apiserver" ] && [ -x "$out/etcd" ]; then
  echo "$out"
  exit 0
fi
mkdir -p "$out"
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT

# kube-apiserver is the kind node's (scripts/kind/kube-binaries.sh): one
# build of k8s.io/kubernetes serves both, and a cold run that needs the
# node image builds it once.
step "envtest assets: kube-apiserver $KUBE_VERSION (the kind node's, scripts/kind/kube-binaries.sh)"
kbin=$(bash scripts/kind/kube-binaries.sh kube-apiserver | tail -1)
ln -f "$kbin/kube-apiserver" "$out/kube-apiserver" 2>/dev/null || cp "$kbin/kube-apiserver" "$out/kube-apiserver"

step "envtest assets: etcd $ETCD_VERSION (go.etcd.io/etcd/server/v3/etcdmain)"
mkdir -p "$src/etcd"
cat >"$src/etcd/go.mod" <<GOMOD
module pillar.local/etcdasset

go 1.24

require go.etcd.io/etcd/server/v3 $ETCD_VERSION
GOMOD
cat >"$src/etcd/main.go" <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
(cd "$src/etcd" && GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1 || true; GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -o "$out/etcd" .) ||
  die "etcd build failed"
note "cached in $out"
echo "$out"
