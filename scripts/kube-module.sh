#!/usr/bin/env bash
# kube-module.sh VERSION DIR: writes DIR/go.mod, a module requiring
# k8s.io/kubernetes@VERSION whose staging modules (replaced by local paths
# in Kubernetes' own go.mod) are replaced with their published releases of
# the same version, so Kubernetes' commands build from the Go module proxy.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"
version=$1 dir=$2
staging=v0${version#v1}
gomod=$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
[ -f "$gomod" ] || die "could not download k8s.io/kubernetes@$version"
mkdir -p "$dir"
{
  echo "module pillar.local/kube"
  echo
  sed -n 's/^go \(.*\)$/go \1/p' "$gomod" | head -1
  echo
  echo "require k8s.io/kubernetes $version"
  echo
  grep -E '^[[:space:]]*k8s\.io/[a-z0-9-]+ => \./staging' "$gomod" | awk -v v="$staging" '{print "replace " $1 " => " $1 " " v}'
} >"$dir/go.mod"
