#!/usr/bin/env bash
# shellcheck disable=SC2016  # backticks in single quotes are Markdown, not expansions
# make bench: what the gateway adds to a request against a bare reverse proxy
# on the same provider simulator, replica propagation on PostgreSQL, Go
# micro-benchmarks of the proxy path and the scheduler. Writes
# docs/benchmarks.md. Exits non-zero only when something fails; a missed
# target is printed loudly instead (see docs/benchmarks.md, Method).
#
# Sizes (defaults keep the whole run near three minutes on two cores):
#   BENCH_N=5000 BENCH_STREAM_N=5000 BENCH_THROUGHPUT_N=10000 BENCH_PROPAGATION_N=200
#   BENCH_SKIP_POSTGRES=1 leaves out the PostgreSQL sections (and so does the doc written).
#   BENCH_SKIP_KIND=1 leaves out the kind cluster section (about 5 minutes with its images cached).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

for b in proxy sim; do [ -x "bin/$b" ] || die "bin/$b missing: run make bench (it builds first) or make build"; done

tmp=$(mktemp -d)
cleanup() { rm -rf "$tmp"; }
trap cleanup EXIT

# The helpers are built like bin/proxy (see the Makefile), so no path has a
# different toolchain setting.
step "building the benchmark tools (baseline proxy, load generator, …)"
export CGO_ENABLED=0
go build -trimpath -ldflags '-s -w' -o "$tmp/bareproxy" ./conformance/bench/cmd/bareproxy
go build -trimpath -ldflags '-s -w' -o "$tmp/loadgen" ./conformance/bench/cmd/loadgen
go build -trimpath -ldflags '-s -w' -o "$tmp/propagation" ./conformance/bench/cmd/propagation
go build -trimpath -ldflags '-s -w' -o "$tmp/benchtable" ./conformance/bench/cmd/benchtable

# The Go commands start, wait for and stop the processes they measure
# (through conformance/harness/runner), each logging into a temporary
# directory that goes with them.
step "load: gateway vs bare reverse proxy (c=1 latency, time to first event, throughput); loadgen starts the simulator, the gateway, the baseline and its control"
commit=$(git describe --always --dirty 2>/dev/null || echo unknown)
"$tmp/loadgen" --bin-dir bin --bareproxy "$tmp/bareproxy" \
  --n "${BENCH_N:-5000}" --stream-n "${BENCH_STREAM_N:-5000}" --throughput-n "${BENCH_THROUGHPUT_N:-10000}" \
  --commit "$commit" --out "$tmp/overhead.md"

: >"$tmp/propagation.md"
if [ -z "${BENCH_SKIP_POSTGRES:-}" ]; then
  step "replica propagation on PostgreSQL (the simulator and two replicas on a fresh schema)"
  pgurl=$(bash scripts/postgres.sh)
  "$tmp/propagation" --bin-dir bin --database-url "$pgurl" \
    --n "${BENCH_PROPAGATION_N:-200}" --out "$tmp/propagation.md"
fi

step "micro-benchmarks of the proxy path (in-process)"
# Three rounds of every benchmark, so the gateway's and the baseline's runs
# take turns; the doc shows the median, which one slow run on a busy machine
# does not move.
for _ in 1 2 3; do
  go test -run '^$' -bench . -benchmem -benchtime 0.5s -count 1 ./conformance/bench/
done | tee "$tmp/micro.txt"
go test -run '^$' -bench ScanRequest1MB -benchmem -count 1 ./impl/gateway/relay/ | tee -a "$tmp/micro.txt"
go test -run '^$' -bench Admit -benchmem -count 1 ./impl/gateway/limits/ | tee -a "$tmp/micro.txt"

step "router plugin cost (a Go WASM module under wazero) and the proxy path with a one-plugin chain"
# Three rounds, medians in the doc (benchtable); then the proxy path with the
# built-in router and with a one-plugin chain, alternating in one process.
for _ in 1 2 3; do
  go test -run '^$' -bench 'BenchmarkRoute$|BenchmarkRouteV1$|BenchmarkCallFloor$' -benchmem -benchtime 20000x -count 1 ./impl/gateway/plugins/
  go test -run '^$' -bench 'BenchmarkRelay(RouterPlugin)?$' -benchmem -benchtime 20000x -count 1 ./impl/gateway/relay/
done | tee "$tmp/plugins.txt"
go run ./conformance/bench/cmd/routercost --plugin bin/plugins/pinrouter.wasm --n "${BENCH_ROUTER_N:-20000}" --out "$tmp/routercost.md"
cut -d' ' -f1-3 /proc/loadavg >"$tmp/plugins-load.txt"

if [ -z "${BENCH_SKIP_POSTGRES:-}" ]; then
  step "scheduler job throughput (SQLite and PostgreSQL)"
  TEST_DATABASE_URL=$pgurl go test -run '^$' -bench JobThroughput -benchtime 3000x -count 1 ./impl/gateway/scheduler/ | tee "$tmp/jobs.txt"
fi

if [ -z "${BENCH_SKIP_KIND:-}" ]; then
  step "pillar-csi on kind: PVC-to-Bound and pod-to-Running (scripts/e2e-kind.sh --bench)"
  bash scripts/e2e-kind.sh --bench
  cp bin/artifacts/kind/bench.md "$tmp/kind-bench.md"
  cat "$tmp/kind-bench.md"
fi

{
  cat "$tmp/overhead.md"
  cat "$tmp/propagation.md"
  echo
  echo "## Proxy path micro-benchmarks (in-process, no network)"
  echo
  "$tmp/benchtable" <"$tmp/micro.txt"
  echo
  echo "CPU: $(sed -n 's/^cpu: *//p' "$tmp/micro.txt" | head -1 | sed 's/[[:space:]]*$//')."
  echo
  cat <<'EOF'
Each figure is the median of three runs, taken in turns. `BenchmarkProxyPath` sends one request at
a time through each proxy's `ServeHTTP`, with a reused request and response writer, to a provider
that answers in memory (a message of about 260 bytes, or a 14-event stream delivered one event per
read). `gateway` is `relay.Handler` on an in-memory snapshot with its metrics and usage recorder
wired as in bin/proxy (only the database write is left out); `bare` is the baseline above
(`bench.NewBareProxy`: the body read into memory, then a stock `httputil.ReverseProxy` with a
buffer pool). `BenchmarkProxyPathParallel` does the same from GOMAXPROCS goroutines at once, which
shows contention on shared state. Allocations include the usage recorder's background work.
`BenchmarkScanRequest1MB` (in `impl/gateway/relay`) is the top-level scan for `model` and `stream`
in a 1 MB prompt. `BenchmarkAdmit` (in `impl/gateway/limits`) is the `default_limits` check of a
principal with a request and a token limit, from GOMAXPROCS goroutines.
EOF
  echo
  echo "## Router plugins"
  echo
  echo 'Target: a router plugin call < 5 µs; the proxy path with a one-plugin chain <= 1.05x the built-in router.'
  echo 'Per call of the sample pin router under ABI v2 (`BenchmarkRoute`, impl/gateway/plugins), the floor under it'
  echo 'in the same run (`BenchmarkCallFloor`: an empty export through the same watchdog and termination checks),'
  echo 'the same choice by an ABI v1 module (`BenchmarkRouteV1`, JSON per call), and the in-process proxy path with'
  echo 'the built-in router (`BenchmarkRelay`) and with a one-plugin chain (`BenchmarkRelayRouterPlugin`):'
  echo
  "$tmp/benchtable" <"$tmp/plugins.txt"
  echo
  route_ns=$(awk '$1 ~ /^BenchmarkRoute-/ {print $3}' "$tmp/plugins.txt" | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
  route_met=met; awk -v ns="$route_ns" 'BEGIN {exit !(ns >= 5000)}' && route_met='**missed**'
  echo "Router plugin call (\`BenchmarkRoute\`, median): ${route_ns} ns against a target of < 5000 ns: ${route_met}."
  echo "Load average when the step ended: $(cat "$tmp/plugins-load.txt") (wall-clock figures on a loaded machine are a multiple of the CPU cost)."
  echo
  echo 'The proxy path (`relay.Handler.ServeHTTP`, in-memory provider, no network) with the built-in router and'
  echo 'with the pin router after it, requests alternating in one process (`conformance/bench/cmd/routercost`):'
  echo
  cat "$tmp/routercost.md"
  echo
  cat <<'EOF'
A call binds nothing and starts nothing: the chain entry was bound once per snapshot (config and
upstream table delivered to each instance once), an idle configured instance is taken from the
binding's pool, a binary record goes into the buffer the guest keeps, and the answer is read in
place; our side of the call allocates nothing (a memory profile of `BenchmarkRoute` puts all 3
allocations in wazero). What a call still costs, from a CPU profile of `BenchmarkRoute`: wazero v1.12
starts a watcher goroutine for every call once termination checks are compiled in
(`CloseModuleOnCanceledOrTimeout`: about 40% of the call's CPU, and its scheduling is what a loaded
machine stretches), the checks themselves leave the guest at every loop header and Go function
entry, and the Go guest's exported-function entry. `BenchmarkCallFloor` is that floor for an empty
export. The checks cannot be dropped: without them a guest loop could not be interrupted (the
hostile plugin's `loop` mode). The in-process proxy path takes a few microseconds, so a call of
that size shows as a large ratio there, and still as 1.1–1.2x over loopback HTTP: the ratio target
stays missed until wazero stops starting a goroutine per call and leaving the guest at every loop
(upstream issue wazero#2466), or the router is a module without a Go runtime. ABI v1 modules
still run, at the old cost (`RouteV1`). Chains with only built-in routers pay nothing per request
(precomputed at snapshot build).
EOF
  if [ -z "${BENCH_SKIP_POSTGRES:-}" ]; then
    echo
    echo "## Scheduler job throughput"
    echo
    echo '3 000 no-op jobs enqueued, then drained by one scheduler with 64 workers (enqueue to done):'
    echo
    echo '```'
    grep -E '^Benchmark' "$tmp/jobs.txt"
    echo '```'
  fi
  if [ -z "${BENCH_SKIP_KIND:-}" ]; then
    echo
    echo "## pillar-csi on kind: PVC-to-Bound and pod-to-Running"
    echo
    echo 'One-node kind cluster (`make e2e-kind` setup: simulated storage, loop-device node plugin, the chart'"'"'s'
    echo 'sidecars), 20 claims of 32 MiB created one at a time on the LVM thin store; each is timed from create'
    echo 'to Bound, then a pod using it from create to Running (attach, connect, mkfs, mount). The "of which"'
    echo 'rows are the driver'"'"'s own CSI calls, as the controller and node plugin log them (`csi_call`):'
    echo
    cat "$tmp/kind-bench.md"
    echo
    cat <<'EOF'
Most of pod-to-Running is the kubelet, not the driver: before it mounts an attachable volume the
kubelet waits until its own node status lists the volume in `volumesInUse` (kubelet log at `--v=5`:
"VerifyControllerAttachedVolume failed … volume not marked in-use"), and it writes node status every
`nodeStatusUpdateFrequency`, 10 s by default. A pod therefore waits 0–10 s for that report; this
serial bench creates each pod right after the previous one started, which lines every pod up with
the same point of the 10 s cycle. Attach (external-attacher → `ControllerPublishVolume`) takes well
under a second, staging and publishing together a few hundred milliseconds.
EOF
  fi
} >"$tmp/benchmarks.md"
mv "$tmp/benchmarks.md" docs/benchmarks.md
step "wrote docs/benchmarks.md"
