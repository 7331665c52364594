#!/usr/bin/env bash
# Every test tier, in order. Called by `make test` after `make setup`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
start=$(date +%s)

# The qemu guest image (debootstrap + the zfs module built by dkms) takes
# 15-30 minutes from an empty cache and needs nothing from the tiers below:
# build it in the background while they run.
mkdir -p bin/artifacts/kernel
guest_log=bin/artifacts/kernel/guest-image.log
bash scripts/kernel/guest-image.sh >"$guest_log" 2>&1 &
guest_pid=$!
# The kind e2e's images: the CSI sidecars (with csi-snapshotter and the
# snapshot-controller, one go build of about 20 minutes of its own) and the
# node image (Kubernetes, CoreDNS from the module proxy), 30-40 minutes
# from an empty cache on two busy cores before the snapshot images; also
# built beside the tiers below.
kind_log=bin/artifacts/kind/images.log
mkdir -p bin/artifacts/kind
bash scripts/docker.sh
# Kubernetes' e2e.test (the external storage suite, built from the same
# module as the node's binaries) follows in the same job.
{ bash scripts/kind/sidecar-images.sh && bash scripts/kind/node-image.sh && bash scripts/kind/e2e-binary.sh; } >"$kind_log" 2>&1 &
kind_pid=$!
trap 'kill $guest_pid $kind_pid 2>/dev/null || true' EXIT

step "vet"
go vet ./...
go vet -tags kinde2e ./conformance/kind/
go vet -tags kernelguest ./conformance/kernel/...
out=$(gofmt -l impl sim conformance 2>/dev/null || true)
[ -z "$out" ] || die "gofmt needed: $out"
bash scripts/shellcheck.sh

step "verify (make generate and go mod tidy change nothing; pins; impl/sim dependency boundary)"
bash scripts/verify.sh

step "PostgreSQL for the store suite"
TEST_DATABASE_URL=$(bash scripts/postgres.sh)
export TEST_DATABASE_URL

step "unit tests (race detector on the concurrent request-path packages)"
CGO_ENABLED=1 go test -race -count=1 ./impl/gateway/relay/... ./impl/gateway/snapshot/... ./impl/gateway/usage/... ./impl/gateway/secret/... ./impl/gateway/oauth/... ./impl/gateway/quota/... ./impl/gateway/warmup/... ./impl/gateway/keepalive/...
go test -count=1 ./impl/... ./sim/...

step "fuzz: each target for a bounded time (seed corpora run in the unit tests above)"
# A crash writes its input under testdata/fuzz/ and fails the run; commit it
# as a regression seed once fixed.
for target in \
  "FuzzScanRequest ./impl/gateway/relay/" \
  "FuzzSSETap ./impl/gateway/relay/" \
  "FuzzRelayStreamPassthrough ./impl/gateway/relay/" \
  "FuzzTranslate ./impl/gateway/openai/" \
  "FuzzStream ./impl/gateway/openai/" \
  "FuzzDecodeEvent ./impl/gateway/openai/" \
  "FuzzSchemaChecks ./impl/gateway/openai/" \
  "FuzzDecodeRequest ./impl/gateway/openai/" \
  "FuzzDecode ./impl/gateway/admin/" \
  "FuzzParse ./impl/pillar/agentconfig/"; do
  read -r name pkg <<<"$target"
  log=bin/artifacts/fuzz-$name.log
  if ! go test -run='^$' -fuzz="^${name}\$" -fuzztime="${PILLAR_FUZZTIME:-8s}" "$pkg" >"$log" 2>&1; then
    tail -20 "$log" >&2
    die "fuzz target $name found a failure (its input is under testdata/fuzz/$name in $pkg)"
  fi
  note "$name: $(grep -oE 'execs: [0-9]+' "$log" | tail -1 | cut -d' ' -f2) executions, no failure"
done

step "envtest assets (kube-apiserver and etcd built from the Go module proxy; cached by version)"
KUBEBUILDER_ASSETS=$(bash scripts/kube-assets.sh)
export KUBEBUILDER_ASSETS

step "build"
make --no-print-directory build

step "container images (Docker engine, debootstrap base, PostgreSQL, proxy, sim; cached by content)"
bash scripts/images.sh

step "conformance suites against bin/"
go test -count=1 -timeout 30m ./conformance/... -args -bin-dir="$PWD/bin"

# The kind suite and the real kernel run side by side: the kind suite
# spends most of its time waiting for pods and kubelets, the kernel suite
# is qemu's CPU, and one after the other they were a third of a cold run.
step "real kernel under qemu (make e2e-kernel: agent, controller, node, LVM, ZFS, nvmet, nvme connect), in the background"
if ! wait $guest_pid; then tail -30 "$guest_log" >&2; die "building the kernel guest image failed (log: $guest_log)"; fi
kernel_out=bin/artifacts/kernel/e2e.log
# setsid: its own process group, so a failure here stops qemu with it.
setsid bash scripts/e2e-kernel.sh >"$kernel_out" 2>&1 &
kernel_pid=$!
kernel_t0=$SECONDS
trap 'kill $kind_pid 2>/dev/null || true; kill -- -$kernel_pid 2>/dev/null || true' EXIT
note "its output: $kernel_out (shown here when the kind suite is done)"

step "kind e2e (make e2e-kind: pillar-csi and proxy charts on an offline kind cluster)"
if ! wait $kind_pid; then tail -30 "$kind_log" >&2; die "building the kind images failed (log: $kind_log)"; fi
# What the background build took, piece by piece (nothing when cached).
grep -E 'built in [0-9]+s|done in [0-9]+s' "$kind_log" >&2 || true
bash scripts/e2e-kind.sh

step "real kernel under qemu: waiting for it (started $((SECONDS - kernel_t0))s ago)"
kernel_rc=0
wait $kernel_pid || kernel_rc=$?
trap - EXIT
cat "$kernel_out"
[ $kernel_rc = 0 ] || die "kernel e2e failed (exit $kernel_rc; console in bin/artifacts/kernel/console.log)"

step "requirement trace"
if [ -x ../shared/scripts/trace ]; then ../shared/scripts/trace | tail -1; fi
step "all tests passed in $(( $(date +%s) - start ))s"
