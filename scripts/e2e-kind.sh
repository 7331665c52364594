#!/usr/bin/env bash
# The kind e2e (make e2e-kind): builds or reuses the offline kind node image
# (scripts/kind/node-image.sh), the project's images (scripts/images.sh) and
# the CSI sidecar and snapshot images (scripts/kind/sidecar-images.sh), then runs the
# Ginkgo suite conformance/kind, which creates the cluster through kind's Go
# API, installs charts/pillar-csi and charts/proxy with Helm's Go packages,
# exports the cluster's logs to bin/artifacts/kind on failure and deletes
# the cluster at the end.
#   scripts/e2e-kind.sh           the e2e specs
#   scripts/e2e-kind.sh --bench   the PVC-to-Bound / pod-to-Running bench instead;
#                                 its table goes to bin/artifacts/kind/bench.md
#   scripts/e2e-kind.sh --storage every spec of Kubernetes' external storage suite
#                                 (make e2e-storage) instead of make test's subset,
#                                 and of the kind specs only the one it needs
#   scripts/e2e-kind.sh --storage [--focus REGEX] [--with LABELS] [--keep]
#       --focus REGEX   only the external storage specs whose full name
#                       matches REGEX (a Ginkgo focus), to re-run a few
#       --with LABELS   also the kind specs matching this Ginkgo label
#                       expression (e.g. 'snapshots && zfs')
#       --keep          leave the cluster running (delete it with
#                       `go run sigs.k8s.io/kind delete cluster --name pillar-e2e`)
# Both runs write the external storage suite's counts to
# bin/artifacts/kind/storage-e2e.md and its log beside it.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
t0=$SECONDS
filter='!bench'
# The bench needs only the first spec's agent, stores and classes.
[ "${1:-}" = --bench ] && filter='bench || S-AG-14'
storage_focus=()
if [ "${1:-}" = --storage ]; then
  shift
  filter='S-AG-14 || storage-e2e'
  focus='External Storage \[Driver: pillar-'
  extra=()
  while [ $# -gt 0 ]; do
    case "$1" in
      --focus) [ $# -ge 2 ] || die "--focus needs a regular expression"; focus=$2; shift 2 ;;
      --with) [ $# -ge 2 ] || die "--with needs a label expression"; filter="$filter || ($2)"; shift 2 ;;
      --keep) extra+=(-keep-cluster); shift ;;
      *) die "unknown option $1 (see the head of $0)" ;;
    esac
  done
  # Ginkgo's own suite limit (1 h by default) must outlast the storage run,
  # or it deletes the cluster under the last specs.
  storage_focus=(-storage-e2e-focus="$focus" -storage-e2e-timeout=150m -ginkgo.timeout=175m "${extra[@]}")
fi

bash scripts/docker.sh
step "kind node image (Kubernetes, etcd, CoreDNS, pause built from the Go module proxy; cached by content)"
node_image=$(bash scripts/kind/node-image.sh)
note "node image: $node_image"
step "project images"
bash scripts/images.sh
step "CSI sidecar images"
bash scripts/kind/sidecar-images.sh >/dev/null
# The snapshot CRDs the suite installs, from the Go module cache.
snapshot_crds=$(bash scripts/kind/snapshot-crds.sh)
step "Kubernetes' e2e.test and the images of its storage patterns (cached by version)"
t1=$SECONDS
e2e_test=$(bash scripts/kind/e2e-binary.sh)
e2e_images=$(bash scripts/kind/e2e-images.sh | paste -sd, -)
note "e2e.test and its images ready in $((SECONDS - t1))s"

mkdir -p bin/artifacts/kind
step "conformance/kind on a new cluster"
rc=0
go test -v -tags kinde2e -count=1 -timeout 180m ./conformance/kind/ -args \
  -node-image="$node_image" -artifacts="$PWD/bin/artifacts/kind" -snapshot-crds="$snapshot_crds" \
  -bench-out="$PWD/bin/artifacts/kind/bench.md" \
  -storage-e2e="$e2e_test" -storage-e2e-ginkgo="$(dirname "$e2e_test")/ginkgo" -storage-e2e-images="$e2e_images" \
  -storage-e2e-out="$PWD/bin/artifacts/kind/storage-e2e.md" "${storage_focus[@]}" \
  -ginkgo.label-filter="$filter" -ginkgo.v -ginkgo.no-color >bin/artifacts/kind/e2e.log 2>&1 || rc=$?
# The specs run (Ginkgo prints "• [time]" after each), the suite's own
# notes, the summary.
grep -E '^(• \[|pillar-csi installed by its chart |the proxy installed by its chart |Ran |SUCCESS|FAIL|ok|PASS|\[FAIL\])|cluster up|images loaded|rolling restart|external storage suite|^(FAILED|PANICKED|TIMEDOUT): |^\| ' bin/artifacts/kind/e2e.log >&2 || true
# On failure: each failed spec's message (what CI's excerpt must show),
# then the end of the log.
[ "$rc" = 0 ] || { grep -A25 '\[FAILED\]' bin/artifacts/kind/e2e.log | head -150 >&2 || true
  tail -40 bin/artifacts/kind/e2e.log >&2; die "kind e2e failed (log: bin/artifacts/kind/e2e.log)"; }
note "kind e2e done in $((SECONDS - t0))s"
