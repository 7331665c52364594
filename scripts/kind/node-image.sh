#!/usr/bin/env bash
# Builds the offline kind node image (docs/kind.md) and prints its
# reference; progress goes to stderr. Nothing is pulled: the root is
# debootstrapped (systemd, containerd and runc from Debian, the CNI
# plugins), kind's node files come from the sigs.k8s.io/kind module, the
# Kubernetes binaries and etcd are built from the Go module proxy, and the
# control-plane images (FROM scratch, tagged as kubeadm asks) are saved
# into the node for containerd to import at boot. Cached by content: the
# image tag is a hash of everything it is made of.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib.sh
# KUBE_VERSION: scripts/versions.env (loaded by lib.sh).
KIND_VERSION=$(go list -m -f '{{.Version}}' sigs.k8s.io/kind)
COREDNS_MODULE=github.com/coredns/coredns
bash scripts/docker.sh >&2
source scripts/debian.sh

node_pkgs="systemd systemd-sysv dbus containerd runc containernetworking-plugins conntrack iptables nftables iproute2 ethtool util-linux mount kmod libseccomp2 e2fsprogs xfsprogs bash ca-certificates curl jq procps socat"
hash=$( { cat scripts/kind/node-image.sh scripts/kind/kube-binaries.sh scripts/kube-module.sh scripts/debian.sh sim/cmd/pause/main.go scripts/kind/node/*;
  echo "$KUBE_VERSION $KIND_VERSION $base_hash $node_pkgs"; } | hashof)
ref=pillar/kind-node:$KUBE_VERSION-$hash
if exists "$ref"; then note "$ref cached"; echo "$ref"; exit 0; fi
t0=$SECONDS
kcache=$PILLAR_CACHE/kind
mkdir -p "$kcache"

# ---- binaries ---------------------------------------------------------------
kbin=$(bash scripts/kind/kube-binaries.sh)
assets=$(bash scripts/kube-assets.sh)
kubeadm=$kbin/kubeadm
images=$("$kubeadm" config images list --kubernetes-version "$KUBE_VERSION" 2>/dev/null)
img() { echo "$images" | grep -E "/$1:" | head -1; }
coredns_ref=$(img coredns); etcd_ref=$(img etcd); pause_ref=$(img pause)
if [ -z "$coredns_ref" ] || [ -z "$etcd_ref" ] || [ -z "$pause_ref" ]; then die "kubeadm lists no coredns/etcd/pause image: $images"; fi
coredns_version=${coredns_ref##*:}
coredns_bin=$kcache/coredns-$coredns_version
if [ ! -x "$coredns_bin" ]; then
  step "building CoreDNS $coredns_version ($COREDNS_MODULE)"
  src=$(mktemp -d)
  printf 'module pillar.local/coredns\n\ngo 1.24\n\nrequire %s %s\n' "$COREDNS_MODULE" "$coredns_version" >"$src/go.mod"
  (cd "$src" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$coredns_bin.$$" "$COREDNS_MODULE") || die "CoreDNS build failed"
  mv "$coredns_bin.$$" "$coredns_bin"; rm -rf "$src"
fi
ctx=$(mktemp -d)
trap 'as_root rm -rf "$ctx"' EXIT
CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$ctx/pause" ./sim/cmd/pause

# ---- control-plane images -------------------------------------------------
# scratch_image REF BINARY PATH_IN_IMAGE [ENTRYPOINT]
scratch_image() {
  local ref=$1 bin=$2 dest=$3 d
  d=$(mktemp -d -p "$ctx")
  mkdir -p "$d/root$(dirname "$dest")" "$d/root/tmp"
  cp "$bin" "$d/root$dest"
  { echo "FROM scratch"; echo "COPY root /"; echo "ENV PATH=/usr/local/bin:/bin"
    [ -n "${4:-}" ] && echo "ENTRYPOINT [\"$4\"]"; } >"$d/Dockerfile"
  DOCKER_BUILDKIT=0 docker build -q -t "$ref" "$d" >/dev/null 2>&1 || die "docker build $ref failed"
}
step "control-plane images for kubeadm ($KUBE_VERSION)"
for c in kube-apiserver kube-controller-manager kube-scheduler; do
  scratch_image "$(img "$c")" "$kbin/$c" "/usr/local/bin/$c"
done
scratch_image "$etcd_ref" "$assets/etcd" /usr/local/bin/etcd
scratch_image "$coredns_ref" "$coredns_bin" /coredns /coredns
scratch_image "$pause_ref" "$ctx/pause" /pause /pause
# kube-proxy programs iptables through the iptables tools.
kp_tar=$cache/kube-proxy-base-$(echo "$base_hash iptables conntrack" | hashof).tar
[ -f "$kp_tar" ] || { step "kube-proxy base (iptables, conntrack)"; apt_root_tar "$kp_tar" main "iptables conntrack"; }
kp_base=pillar/kube-proxy-base:$(sha256sum <"$kp_tar" | cut -c1-12)
exists "$kp_base" || docker import "$kp_tar" "$kp_base" >/dev/null
d=$(mktemp -d -p "$ctx"); cp "$kbin/kube-proxy" "$d/"
printf 'FROM %s\nCOPY kube-proxy /usr/local/bin/kube-proxy\nENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n' "$kp_base" >"$d/Dockerfile"
DOCKER_BUILDKIT=0 docker build -q -t "$(img kube-proxy)" "$d" >/dev/null 2>&1 || die "docker build kube-proxy failed"
note "$(echo "$images" | tr '\n' ' ')"
# shellcheck disable=SC2086 # one argument per image kubeadm listed
docker save -o "$ctx/images.tar" $images

# ---- the node root ----------------------------------------------------------
kind_files=$(go env GOMODCACHE)/sigs.k8s.io/kind@$KIND_VERSION/images/base/files
[ -d "$kind_files" ] || go mod download sigs.k8s.io/kind >/dev/null
node_finish() {
  local r=$1
  # kind's node files, as its base image Dockerfile lays them out
  as_root cp -r "$kind_files/usr/local/bin/." "$r/usr/local/bin/"
  as_root mkdir -p "$r/kind/bin" "$r/kind/images" "$r/etc/kubernetes/manifests" "$r/etc/cni/net.d" "$r/etc/systemd/system/kubelet.service.d"
  as_root cp -r "$kind_files/kind/." "$r/kind/"
  as_root cp -r "$kind_files/etc/." "$r/etc/"
  as_root chmod -R u+w,go-w "$r/kind" "$r/etc/systemd/system" "$r/usr/local/bin"
  as_root chmod 0755 "$r"/usr/local/bin/* "$r"/kind/bin/*
  # Debian's containerd and the CNI plugins where kind's units look
  as_root ln -sf /usr/bin/containerd "$r/usr/local/bin/containerd"
  as_root rm -rf "$r/opt/cni/bin"; as_root mkdir -p "$r/opt/cni"; as_root ln -s /usr/lib/cni "$r/opt/cni/bin"
  sed "s|@PAUSE_IMAGE@|$pause_ref|" scripts/kind/node/config.toml | as_root tee "$r/etc/containerd/config.toml" >/dev/null
  as_root install -m 0644 scripts/kind/node/10-ptp.conflist "$r/etc/cni/net.d/10-ptp.conflist"
  as_root install -m 0644 scripts/kind/node/kind-images.service "$r/etc/systemd/system/kind-images.service"
  as_root install -m 0755 scripts/kind/node/pillar-entrypoint "$r/usr/local/bin/pillar-entrypoint"
  for b in kubeadm kubelet kubectl; do as_root install -m 0755 "$kbin/$b" "$r/usr/bin/$b"; done
  as_root install -m 0644 "$ctx/images.tar" "$r/kind/images/images.tar"
  echo "$KUBE_VERSION" | as_root tee "$r/kind/version" >/dev/null
  # systemd in a container, as kind's base image sets it up
  as_root find "$r/lib/systemd/system/sysinit.target.wants/" -name systemd-tmpfiles-setup.service -delete
  as_root rm -f "$r"/lib/systemd/system/multi-user.target.wants/* "$r"/etc/systemd/system/*.wants/* \
    "$r"/lib/systemd/system/local-fs.target.wants/* "$r"/lib/systemd/system/sockets.target.wants/*udev* \
    "$r"/lib/systemd/system/sockets.target.wants/*initctl* "$r"/lib/systemd/system/basic.target.wants/*
  echo "ReadKMsg=no" | as_root tee -a "$r/etc/systemd/journald.conf" >/dev/null
  as_root chroot "$r" systemctl enable kubelet.service containerd.service undo-mount-hacks.service kind-images.service >/dev/null 2>&1
  as_root chroot "$r" systemctl mask systemd-binfmt.service >/dev/null 2>&1
}
step "node root: Debian $suite with $node_pkgs"
root_tar=$kcache/node-root-$hash.tar
apt_root_tar "$root_tar" main "$node_pkgs" "" node_finish
step "docker import $ref"
docker import "$root_tar" "$ref-root" >/dev/null
# docker import takes no STOPSIGNAL: one build step adds the config.
d=$(mktemp -d -p "$ctx")
printf 'FROM %s\nENV container=docker\nSTOPSIGNAL SIGRTMIN+3\nENTRYPOINT ["/usr/local/bin/pillar-entrypoint", "/sbin/init"]\n' "$ref-root" >"$d/Dockerfile"
DOCKER_BUILDKIT=0 docker build -q -t "$ref" "$d" >/dev/null 2>&1 || die "docker build $ref failed"
docker rmi "$ref-root" >/dev/null
rm -f "$root_tar"
note "node image built in $((SECONDS - t0))s"
echo "$ref"
