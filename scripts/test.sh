#!/usr/bin/env bash
# Every test tier, in order. Called by `make test` after `make setup`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
start=$(date +%s)
note "disk: $(free_disk)"

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
bash scripts/prune-images.sh
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

# The last three tiers run side by side: the conformance suites and the kind
# suite mostly wait (on timeouts, pods and kubelets), the kernel suite is
# qemu's CPU. One after the other they were a third of a cold run, and the
# kind suite alone (about 15 minutes) was its last quarter.
step "conformance suites, kind e2e and real kernel, side by side"
note "disk: $(free_disk)"
if ! wait $guest_pid; then tail -30 "$guest_log" >&2; die "building the kernel guest image failed (log: $guest_log)"; fi
out=bin/artifacts
declare -A what=() log=() t0=()
# setsid: each in its own process group, so a failure stops the others
# with everything they started (qemu, go test's children).
begin() {
  local name=$1 file=$2
  shift 2
  setsid "$@" >"$file" 2>&1 &
  what[$!]=$name log[$!]=$file t0[$!]=$SECONDS
  note "$name: started, output in $file (shown here when it ends)"
}
# Each group is signalled once and waited for: a second signal would cut
# short the cleanup the first started (the kernel suite's temporary disks,
# about 1 GB, stayed in /tmp when the exit trap signalled again).
stop_all() {
  local p
  for p in "${!what[@]}"; do kill -- -"$p" 2>/dev/null || true; done
  for p in "${!what[@]}"; do wait "$p" 2>/dev/null || true; done
  what=()
}
trap 'kill $kind_pid 2>/dev/null || true; stop_all' EXIT
begin "conformance suites against bin/" $out/conformance.log go test -count=1 -timeout 30m ./conformance/... -args -bin-dir="$PWD/bin"
begin "real kernel under qemu (make e2e-kernel: agent, controller, node, LVM, ZFS, nvmet, nvme connect)" $out/kernel/e2e.log bash scripts/e2e-kernel.sh
# The kind suite needs the background job's images (done by now on a warm
# cache; on a cold one it finishes during the conformance suites).
kind_started=no
start_kind() {
  # What the background build took, piece by piece (nothing when cached).
  grep -E 'built in [0-9]+s|done in [0-9]+s' "$kind_log" >&2 || true
  begin "kind e2e (make e2e-kind: pillar-csi and proxy charts on an offline kind cluster)" $out/kind/suite.log bash scripts/e2e-kind.sh
  kind_started=yes
}
# Until the kind suite starts, the image job's end wakes the loop too.
while [ ${#what[@]} -gt 0 ] || [ $kind_started = no ]; do
  waiting=("${!what[@]}")
  [ $kind_started = yes ] || waiting+=("$kind_pid")
  rc=0
  wait -n -p ended "${waiting[@]}" || rc=$?
  if [ "$ended" = "$kind_pid" ]; then
    [ $rc = 0 ] || { tail -30 "$kind_log" >&2; die "building the kind images failed (log: $kind_log)"; }
    start_kind
    continue
  fi
  name=${what[$ended]}
  unset "what[$ended]"
  step "$name: $([ $rc = 0 ] && echo passed || echo "FAILED (exit $rc)") in $((SECONDS - t0[$ended]))s"
  cat "${log[$ended]}"
  if [ $rc != 0 ]; then
    note "disk: $(free_disk)"
    stop_all
    die "$name failed (its output is above; the kernel's console: $out/kernel/console.log)"
  fi
done
trap - EXIT

step "requirement trace"
if [ -x ../shared/scripts/trace ]; then ../shared/scripts/trace | tail -1; fi
step "all tests passed in $(( $(date +%s) - start ))s"
