#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks for building and testing.
# Idempotent: a second run only checks.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"

need_apt=()
command -v go >/dev/null || die "Go is required (https://go.dev/dl); this project pins go $(grep '^go ' "$here/../go.mod" | cut -d' ' -f2)"
command -v curl >/dev/null || need_apt+=(curl)
command -v git >/dev/null || need_apt+=(git)
command -v gcc >/dev/null || need_apt+=(gcc) # the race detector needs cgo
[ -x "$(pg_bindir)/initdb" ] || need_apt+=(postgresql)
command -v chromium >/dev/null || need_apt+=(chromium fonts-dejavu-core) # the dashboard suite drives headless Chromium
command -v qemu-system-x86_64 >/dev/null || need_apt+=(qemu-system-x86) # make e2e-kernel boots a Debian kernel under qemu
command -v debootstrap >/dev/null || need_apt+=(debootstrap)            # … built from debootstrap
command -v mkfs.ext4 >/dev/null || need_apt+=(e2fsprogs)                # guest images, csi-sanity staging
command -v mkfs.xfs >/dev/null || need_apt+=(xfsprogs)
command -v losetup >/dev/null || need_apt+=(mount)
command -v shellcheck >/dev/null || need_apt+=(shellcheck)             # make vet
command -v protoc >/dev/null || need_apt+=(protobuf-compiler)          # make generate, make verify
command -v wat2wasm >/dev/null || need_apt+=(wabt)                      # plugins written in WebAssembly text (make plugins, plugin tests)
command -v promtool >/dev/null || need_apt+=(prometheus)                # promtool test rules: the proxy chart's alerting rules

if [ ${#need_apt[@]} -gt 0 ]; then
  step "installing ${need_apt[*]} with apt-get"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi
step "go modules"
(cd "$here/.." && go mod download)
step "setup done"
