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
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
cp "$dir/agnhost" "$ctx/agnhost"
# agnhost's own image is Alpine with tools; the storage patterns run it as
# a pod that pauses or as a host exec pod (nsenter, sh), which busybox has.
printf 'FROM pillar/busybox:local\nCOPY agnhost /agnhost\nENTRYPOINT ["/agnhost"]\nCMD ["pause"]\n' >"$ctx/Dockerfile"
h=$( { cat "$ctx/agnhost" "$ctx/Dockerfile"; docker image inspect -f '{{.Id}}' pillar/busybox:local; } | sha256sum | cut -c1-12)
if ! exists "pillar/agnhost:$h"; then
  step "docker build pillar/agnhost:$h"
  DOCKER_BUILDKIT=0 docker build -q -t "pillar/agnhost:$h" "$ctx" >/dev/null 2>"$ctx/log" || { cat "$ctx/log" >&2; die "docker build pillar/agnhost failed"; }
fi
docker tag "pillar/agnhost:$h" "$agnhost"

# The populator the "any volume data source" spec deploys: its module is
# not on the Go module proxy, so sim/cmd/hello-populator stands in under
# the reference of the spec's manifest (docs/sidecars.md).
deploy=$(dirname "$manifest")/../../e2e/testing-manifests/storage-csi/any-volume-datasource/hello-populator-deploy.yaml
populator=$(sed -n 's/^[[:space:]]*image: \(.*hello-populator:.*\)$/\1/p' "$deploy")
[ "$(echo "$populator" | wc -w)" = 1 ] || die "no single hello-populator image in $deploy"
pctx=$(mktemp -d)
trap 'rm -rf "$ctx" "$pctx"' EXIT
CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$pctx/hello-populator" ./sim/cmd/hello-populator || die "building the hello-populator stand-in failed"
printf 'FROM pillar/busybox:local\nCOPY hello-populator /hello-populator\nENTRYPOINT ["/hello-populator"]\n' >"$pctx/Dockerfile"
h=$( { cat "$pctx/hello-populator" "$pctx/Dockerfile"; docker image inspect -f '{{.Id}}' pillar/busybox:local; } | sha256sum | cut -c1-12)
if ! exists "pillar/hello-populator:$h"; then
  step "docker build pillar/hello-populator:$h"
  DOCKER_BUILDKIT=0 docker build -q -t "pillar/hello-populator:$h" "$pctx" >/dev/null 2>"$pctx/log" || { cat "$pctx/log" >&2; die "docker build pillar/hello-populator failed"; }
fi
docker tag "pillar/hello-populator:$h" "$populator"
printf '%s\n' "$busybox" "$glibc" "$nginx" "$agnhost" "$populator"
