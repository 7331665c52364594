#!/usr/bin/env bash
# The images Kubernetes' storage e2e patterns run (busybox, agnhost, the
# glibc image and nginx, which those patterns use only as a shell), made
# offline and tagged under the references e2e.test asks for by default
# (registry.k8s.io/e2e-test-images/…, versions read from the module's
# test/utils/image/manifest.go), so the kind suite loads them into the node
# and no pull happens:
#   busybox, glibc-dns-testing, nginx  the project's busybox and Debian base
#   agnhost                            busybox plus agnhost built from the same
#                                      Kubernetes module (scripts/kind/e2e-binary.sh)
#   hello-populator                    busybox plus the stand-in sim/cmd/hello-populator
#                                      (the populator of "any volume data source";
#                                      reference from the module's manifest)
# Needs scripts/images.sh to have run. Prints the references, one a line.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh
e2e=$(bash scripts/kind/e2e-binary.sh)
dir=$(dirname "$e2e")
manifest=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')/test/utils/image/manifest.go
[ -f "$manifest" ] || die "no $manifest"
# ref ID NAME: registry.k8s.io/e2e-test-images/NAME:<the version the
# manifest gives image ID (Agnhost, not AgnhostPrev)>
ref() {
  local v
  v=$(sed -n "s/^[[:space:]]*configs\[$1\] = Config{list.PromoterE2eRegistry, \"$2\", \"\([^\"]*\)\"}$/\1/p" "$manifest")
  [ "$(echo "$v" | wc -w)" = 1 ] || die "no single version of $1 in $manifest"
  echo "registry.k8s.io/e2e-test-images/$2:$v"
}
exists() { docker image inspect "$1" >/dev/null 2>&1; }
for img in pillar/busybox:local pillar/debian-base:local; do exists "$img" || die "$img missing (scripts/images.sh)"; done
busybox=$(ref BusyBox busybox) glibc=$(ref GlibcDnsTesting glibc-dns-testing) nginx=$(ref Nginx nginx) agnhost=$(ref Agnhost agnhost)
docker tag pillar/busybox:local "$busybox"
docker tag pillar/debian-base:local "$glibc"
docker tag pillar/debian-base:local "$nginx"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# on_busybox NAME BINARY DOCKERFILE-TAIL REF: an image of busybox plus one
# binary, tagged by the hash of what goes into it (so an unchanged binary
# is not rebuilt) and then as REF.
on_busybox() {
  local name=$1 bin=$2 tail=$3 want=$4 ctx="$work/$1" h
  mkdir -p "$ctx"
  cp "$bin" "$ctx/$name"
  printf 'FROM pillar/busybox:local\nCOPY %s /%s\n%s' "$name" "$name" "$tail" >"$ctx/Dockerfile"
  h=$( { cat "$ctx/$name" "$ctx/Dockerfile"; docker image inspect -f '{{.Id}}' pillar/busybox:local; } | sha256sum | cut -c1-12)
  if ! exists "pillar/$name:$h"; then
    step "docker build pillar/$name:$h"
    DOCKER_BUILDKIT=0 docker build -q -t "pillar/$name:$h" "$ctx" >/dev/null 2>"$ctx/log" || { cat "$ctx/log" >&2; die "docker build pillar/$name failed"; }
  fi
  docker tag "pillar/$name:$h" "$want"
}
# agnhost's own image is Alpine with tools; the storage patterns run it as
# a pod that pauses or as a host exec pod (nsenter, sh), which busybox has.
on_busybox agnhost "$dir/agnhost" $'ENTRYPOINT ["/agnhost"]\nCMD ["pause"]\n' "$agnhost"

# The populator the "any volume data source" spec deploys: its module is
# not on the Go module proxy, so sim/cmd/hello-populator stands in under
# the reference of the spec's manifest (docs/sidecars.md).
deploy=$(dirname "$manifest")/../../e2e/testing-manifests/storage-csi/any-volume-datasource/hello-populator-deploy.yaml
populator=$(sed -n 's/^[[:space:]]*image: \(.*hello-populator:.*\)$/\1/p' "$deploy")
[ "$(echo "$populator" | wc -w)" = 1 ] || die "no single hello-populator image in $deploy"
CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$work/hello-populator.bin" ./sim/cmd/hello-populator || die "building the hello-populator stand-in failed"
on_busybox hello-populator "$work/hello-populator.bin" $'ENTRYPOINT ["/hello-populator"]\n' "$populator"
printf '%s\n' "$busybox" "$glibc" "$nginx" "$agnhost" "$populator"
