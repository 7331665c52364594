#!/usr/bin/env bash
# Builds the Kubernetes binaries of the kind node image from the Go module
# proxy: k8s.io/kubernetes at KUBE_VERSION through a wrapper module whose
# replace lines point its staging modules at their published releases
# (scripts/kube-module.sh). The version is stamped as a
# release build stamps it, since kubeadm checks kubelet's and its own.
# Cached under $PILLAR_CACHE/kube/node-bin-<version>; prints that directory.
# With arguments, builds only the binaries named (scripts/kube-assets.sh
# takes kube-apiserver from here for envtest, so one build serves both).
# Each binary is built under a lock of its own: the kind node image's
# background build and the envtest step may ask for one at once.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh
# KUBE_VERSION: scripts/versions.env (loaded by lib.sh).
# kube-apiserver first: envtest waits for it while the rest are built.
bins="kube-apiserver kubeadm kubelet kubectl kube-controller-manager kube-scheduler kube-proxy"
[ $# -gt 0 ] && bins="$*"
out="$PILLAR_CACHE/kube/node-bin-$KUBE_VERSION"
mkdir -p "$out"
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
major=${KUBE_VERSION#v}; major=${major%%.*}
minor=${KUBE_VERSION#v*.}; minor=${minor%%.*}
pkg=k8s.io/component-base/version
ld="-s -w -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z -X $pkg.gitCommit=0000000000000000000000000000000000000000"
ld="$ld ${ld//k8s.io\/component-base\/version/k8s.io/client-go/pkg/version}"
for b in $bins; do
  exec 9>"$out/$b.lock"
  flock 9
  if [ ! -x "$out/$b" ]; then
    # The wrapper module only when something is to be built.
    [ -f "$src/go.mod" ] || bash scripts/kube-module.sh "$KUBE_VERSION" "$src"
    step "building $b $KUBE_VERSION"
    t0=$SECONDS
    (cd "$src" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "$ld" -o "$out/$b.$$" "k8s.io/kubernetes/cmd/$b") || die "$b build failed"
    mv "$out/$b.$$" "$out/$b"
    note "$b built in $((SECONDS - t0))s"
  fi
  exec 9>&-
done
echo "$out"
