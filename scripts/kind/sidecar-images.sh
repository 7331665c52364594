#!/usr/bin/env bash
# The CSI sidecar images of charts/pillar-csi, tagged with the chart's
# default references so it renders unchanged on the offline kind cluster
# (docs/sidecars.md): csi-provisioner, csi-attacher and csi-snapshotter
# (with the cluster's snapshot-controller) built from their Go modules at
# the chart's tags, node-driver-registrar, livenessprobe and
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

# upstream MODULE VERSION CMD...: builds MODULE/cmd/CMD at VERSION for
# each CMD in one `go build` (their shared dependencies compile once)
# through a wrapper module carrying the module's own replace directives
# (go install refuses modules that have any); prints each binary's path.
upstream() {
  local mod=$1 ver=$2 cmd gomod src out missing=() pkgs=() t0
  shift 2
  for cmd in "$@"; do [ -x "$bincache/$cmd-$ver" ] || missing+=("$cmd"); done
  if [ ${#missing[@]} -gt 0 ]; then
    step "building ${missing[*]} $ver from $mod"
    t0=$SECONDS
    gomod=$(go mod download -json "$mod@$ver" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
    [ -f "$gomod" ] || die "could not download $mod@$ver"
    src=$(mktemp -d)
    { echo "module pillar.local/${missing[0]}"; echo; grep -m1 '^go ' "$gomod"; echo; echo "require $mod $ver"; echo
      # Replaces pointing into the module's own tree (external-snapshotter's
      # ./client) cannot apply outside it; the required version is used.
      grep -E '^replace [^(]' "$gomod" | grep -v '=> \./' || true; } >"$src/go.mod"
    for cmd in "${missing[@]}"; do pkgs+=("$mod/cmd/$cmd"); done
    mkdir "$src/bin"
    (cd "$src" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$ver" -o bin/ "${pkgs[@]}") || die "${missing[*]} build failed"
    for cmd in "${missing[@]}"; do mv "$src/bin/$cmd" "$bincache/$cmd-$ver"; done
    rm -rf "$src"
    note "built ${missing[*]} in $((SECONDS - t0))s"
  fi
  for cmd in "$@"; do echo "$bincache/$cmd-$ver"; done
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
# Volume snapshots (chart snapshots.enabled): the sidecar and the cluster's
# snapshot-controller, which the kind suite installs (conformance/kind) under
# the sidecar's registry path and tag.
snap_tag=$(tag_of snapshotter) snap_repo=$(repo_of snapshotter)
mapfile -t snap_bins < <(upstream github.com/kubernetes-csi/external-snapshotter/v8 "$snap_tag" csi-snapshotter snapshot-controller)
[ ${#snap_bins[@]} = 2 ] || die "external-snapshotter $snap_tag build failed"
image "$snap_repo:$snap_tag" "${snap_bins[0]}" csi-snapshotter
image "${snap_repo%/*}/snapshot-controller:$snap_tag" "${snap_bins[1]}" snapshot-controller
