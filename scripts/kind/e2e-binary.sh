#!/usr/bin/env bash
# Builds Kubernetes' end-to-end test binary (e2e.test, whose external storage
# suite runs against pillar-csi in the kind e2e) from the Go module proxy,
# through the same wrapper module and version stamp as the node binaries
# (scripts/kind/kube-binaries.sh), and beside it from the same module graph
# agnhost (scripts/kind/e2e-images.sh makes its image) and the ginkgo CLI
# of e2e.test's Ginkgo version (runs its specs in parallel processes).
# Cached under $PILLAR_CACHE/kube/e2e-<version>; prints e2e.test's path.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh
out="$PILLAR_CACHE/kube/e2e-$KUBE_VERSION"
if [ -x "$out/e2e.test" ] && [ -x "$out/agnhost" ] && [ -x "$out/ginkgo" ]; then echo "$out/e2e.test"; exit 0; fi
mkdir -p "$out"
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
bash scripts/kube-module.sh "$KUBE_VERSION" "$src"
major=${KUBE_VERSION#v}; major=${major%%.*}
minor=${KUBE_VERSION#v*.}; minor=${minor%%.*}
pkg=k8s.io/component-base/version
ld="-s -w -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z -X $pkg.gitCommit=0000000000000000000000000000000000000000"
ld="$ld ${ld//k8s.io\/component-base\/version/k8s.io/client-go/pkg/version}"
# build NAME PACKAGE GO-SUBCOMMAND...: builds in the wrapper module, timed.
build() {
  local name=$1 pkg=$2 t0=$SECONDS
  shift 2
  [ -x "$out/$name" ] && return
  step "building $name $KUBE_VERSION"
  (cd "$src" && GOFLAGS=-mod=mod CGO_ENABLED=0 go "$@" -trimpath -ldflags "$ld" -o "$out/$name.$$" "$pkg") || die "$name build failed"
  mv "$out/$name.$$" "$out/$name"
  note "$name built in $((SECONDS - t0))s"
}
# go vet of Kubernetes' own test package is their CI's business.
build e2e.test k8s.io/kubernetes/test/e2e test -c -vet=off
build agnhost k8s.io/kubernetes/test/images/agnhost build
build ginkgo github.com/onsi/ginkgo/v2/ginkgo build
echo "$out/e2e.test"
