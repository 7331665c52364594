#!/usr/bin/env bash
# The CSI sidecar images of charts/pillar-csi, tagged with the chart's
# default references so it renders unchanged on the offline kind cluster
# (docs/sidecars.md): csi-provisioner and csi-attacher built from their Go
# modules at the chart's tags, node-driver-registrar, livenessprobe and
# csi-resizer from the stand-ins in sim/ (their modules are not on the Go
# module proxy). FROM scratch, cached by content; prints the references.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh
bash scripts/docker.sh >&2
hashof() { sha256sum | cut -c1-12; }
exists() { docker image inspect "$1" >/dev/null 2>&1; }
values=charts/pillar-csi/values.yaml
# tag_of KEY: the default tag of a sidecar in values.yaml (first match
# after the sidecar's key).
tag_of() { awk -v k="$1:" '$1==k{f=1} f&&$1=="tag:"{print $2; exit}' "$values"; }
repo_of() { awk -v k="$1:" '$1==k{f=1} f&&$1=="repository:"{print $2; exit}' "$values"; }
bincache=$PILLAR_CACHE/sidecars
mkdir -p "$bincache"

# upstream MODULE VERSION CMD: builds MODULE/cmd/CMD at VERSION through a
# wrapper module carrying the module's own replace directives (go install
# refuses modules that have any).
upstream() {
  local mod=$1 ver=$2 cmd=$3 out=$bincache/$3-$2 gomod src
  if [ ! -x "$out" ]; then
    step "building $cmd $ver from $mod"
    gomod=$(go mod download -json "$mod@$ver" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
    [ -f "$gomod" ] || die "could not download $mod@$ver"
    src=$(mktemp -d)
    { echo "module pillar.local/$cmd"; echo; grep -m1 '^go ' "$gomod"; echo; echo "require $mod $ver"; echo
      # Replaces pointing into the module's own tree (external-snapshotter's
      # ./client) cannot apply outside it; the required version is used.
      grep -E '^replace [^(]' "$gomod" | grep -v '=> \./' || true; } >"$src/go.mod"
    (cd "$src" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$ver" -o "$out.$$" "$mod/cmd/$cmd") || die "$cmd build failed"
    mv "$out.$$" "$out"; rm -rf "$src"
  fi
  echo "$out"
}
standin() {
  local cmd=$1 out
  out=$(mktemp -d)/$cmd
  CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$out" "./sim/cmd/$cmd" || die "building the $cmd stand-in failed"
  echo "$out"
}
# image REF BINARY NAME
image() {
  local ref=$1 bin=$2 name=$3 ctx h
  ctx=$(mktemp -d)
  mkdir -p "$ctx/tmp"; cp "$bin" "$ctx/$name"
  printf 'FROM scratch\nCOPY %s /%s\nCOPY tmp /tmp\nENTRYPOINT ["/%s"]\n' "$name" "$name" "$name" >"$ctx/Dockerfile"
  h=$(cat "$ctx/$name" "$ctx/Dockerfile" | hashof)
  if ! exists "pillar/$name:$h"; then
    step "docker build pillar/$name:$h ($ref)"
    DOCKER_BUILDKIT=0 docker build -q -t "pillar/$name:$h" "$ctx" >/dev/null 2>&1 || die "docker build $ref failed"
  fi
  docker tag "pillar/$name:$h" "$ref"
  rm -rf "$ctx"
  echo "$ref"
}
image "$(repo_of provisioner):$(tag_of provisioner)" "$(upstream github.com/kubernetes-csi/external-provisioner/v6 "$(tag_of provisioner)" csi-provisioner)" csi-provisioner
image "$(repo_of attacher):$(tag_of attacher)" "$(upstream github.com/kubernetes-csi/external-attacher/v4 "$(tag_of attacher)" csi-attacher)" csi-attacher
image "$(repo_of resizer):$(tag_of resizer)" "$(standin csi-resizer)" csi-resizer
image "$(repo_of livenessProbe):$(tag_of livenessProbe)" "$(standin livenessprobe)" livenessprobe
image "$(repo_of nodeDriverRegistrar):$(tag_of nodeDriverRegistrar)" "$(standin csi-node-driver-registrar)" csi-node-driver-registrar
