#!/usr/bin/env bash
# Prints the directory of the snapshot.storage.k8s.io/v1 CRDs that go with
# the chart's csi-snapshotter tag: the YAML shipped in the module
# github.com/kubernetes-csi/external-snapshotter/client/v8 (config/crd), at
# the version the snapshotter module requires, which is the client
# scripts/kind/sidecar-images.sh compiles both binaries against (its wrapper
# drops the module's in-tree replace of client/v8). From the module cache;
# the kind suite applies them (conformance/kind, -snapshot-crds).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh
values=charts/pillar-csi/values.yaml
tag=$(awk '$1=="snapshotter:"{f=1} f&&$1=="tag:"{print $2; exit}' "$values")
[ -n "$tag" ] || die "no snapshotter tag in $values"
field() { sed -n "s/^[[:space:]]*\"$1\": \"\\(.*\\)\",\$/\\1/p"; }
main=github.com/kubernetes-csi/external-snapshotter/v8
client=github.com/kubernetes-csi/external-snapshotter/client/v8
gomod=$(go mod download -json "$main@$tag" | field GoMod)
[ -f "$gomod" ] || die "could not download $main@$tag"
ver=$(awk -v m="$client" '$1==m{print $2; exit}' "$gomod")
[ -n "$ver" ] || die "$main@$tag does not require $client"
dir=$(go mod download -json "$client@$ver" | field Dir)/config/crd
for kind in volumesnapshotclasses volumesnapshotcontents volumesnapshots; do
  [ -f "$dir/snapshot.storage.k8s.io_$kind.yaml" ] || die "$client@$ver has no config/crd/snapshot.storage.k8s.io_$kind.yaml"
done
echo "$dir"
