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
#   BENCH_INTERLEAVED_N=25000 (rounds of one request per path, each kind; p99 is then the 250th slowest)
#   BENCH_TAIL_N=2000 (rounds of the traced run that breaks the slowest 1% down)
#   BENCH_DIALECT_N=5000 (streaming rounds of /v1/chat/completions against /v1/messages on the same gateway)
#   BENCH_BEDROCK_N=2000 (rounds of each kind through a gateway with a Bedrock upstream against the Anthropic one)
#   BENCH_SKIP_POSTGRES=1 leaves out the PostgreSQL sections (and so does the doc written).
#   BENCH_SKIP_KIND=1 leaves out the kind cluster section (about 5 minutes with its images cached).
# Scale (issue 22, parts 3-5; about four minutes together, see the step "scale"):
#   BENCH_STREAMS=2000 BENCH_STREAMS_HOLD=10s   concurrent SSE streams through one proxy, and how long
#                                               each pauses after its first event (all must be open at once)
#   BENCH_SCALE_PRINCIPALS=10000 BENCH_SCALE_KEYS=50000 BENCH_SCALE_UPSTREAMS=1000 BENCH_SCALE_CHAINS=100
#                                               the configuration size of the rebuild and propagation runs
#   BENCH_REBUILD_N=20                          snapshot rebuilds measured per store
#   BENCH_PROPAGATION_SCALE_N=20                replica propagation changes measured at that size (PostgreSQL)
#   BENCH_ADMIN_WRITES=6000 BENCH_ADMIN_WORKERS=8 BENCH_ADMIN_PROXY_N=3000
#                                               admin writes per store, concurrent admin clients, and c=1
#                                               proxied requests measured without admin load
#   BENCH_ADMIN_PROFILE=0                       no CPU profile of the proxies during the admin load (default:
#                                               bin/artifacts/bench/adminload-profile.md)
#   BENCH_SKIP_SCALE=1 leaves the scale sections out.
#   BENCH_AGENT_N=50 BENCH_AGENT_RTT_N=3000 size the pillar-csi agent step.
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
go build -trimpath -ldflags '-s -w' -o "$tmp/tracedproxy" ./conformance/bench/cmd/tracedproxy

# Scale (issue 22, parts 3-5): one self-contained step, its sections
# gathered in $tmp/scale.md.
: >"$tmp/scale.md"
if [ -z "${BENCH_SKIP_SCALE:-}" ]; then
  step "scale: 2,000 SSE streams, snapshot rebuild and propagation at scale, admin API under load"
  for c in streams rebuild adminload; do
    go build -trimpath -ldflags '-s -w' -o "$tmp/$c" "./conformance/bench/cmd/$c"
  done
  scale_pg=()
  if [ -z "${BENCH_SKIP_POSTGRES:-}" ]; then scale_pg=(--database-url "$(bash scripts/postgres.sh | tail -1)"); fi
  scale_size=(--principals "${BENCH_SCALE_PRINCIPALS:-10000}" --keys "${BENCH_SCALE_KEYS:-50000}"
    --upstreams "${BENCH_SCALE_UPSTREAMS:-1000}" --chains "${BENCH_SCALE_CHAINS:-100}")
  "$tmp/streams" --bin-dir bin --n "${BENCH_STREAMS:-2000}" --hold "${BENCH_STREAMS_HOLD:-10s}" --out "$tmp/scale-streams.md"
  "$tmp/rebuild" "${scale_size[@]}" --n "${BENCH_REBUILD_N:-20}" "${scale_pg[@]}" --out "$tmp/scale-rebuild.md"
  : >"$tmp/scale-propagation.md"
  if [ -z "${BENCH_SKIP_POSTGRES:-}" ]; then
    "$tmp/propagation" --bin-dir bin "${scale_pg[@]}" --n "${BENCH_PROPAGATION_SCALE_N:-20}" \
      --seed-principals "${BENCH_SCALE_PRINCIPALS:-10000}" --seed-keys "${BENCH_SCALE_KEYS:-50000}" \
      --seed-upstreams "${BENCH_SCALE_UPSTREAMS:-1000}" --seed-chains "${BENCH_SCALE_CHAINS:-100}" --out "$tmp/scale-propagation.md"
  fi
  # Where the proxies' CPU went during the admin load (pprof through the
  # opt-in /debug/pprof/): bin/artifacts/bench/adminload-profile.md.
  admin_profile=()
  if [ "${BENCH_ADMIN_PROFILE:-1}" != 0 ]; then admin_profile=(--profile-top bin/artifacts/bench/adminload-profile.md); fi
  "$tmp/adminload" --bin-dir bin --bareproxy "$tmp/bareproxy" --writes "${BENCH_ADMIN_WRITES:-6000}" --workers "${BENCH_ADMIN_WORKERS:-8}" \
    --proxy-n "${BENCH_ADMIN_PROXY_N:-3000}" "${scale_pg[@]}" "${admin_profile[@]}" --out "$tmp/scale-admin.md"
  # The method of each section is fixed prose in scripts/benchdoc/; the
  # commands print only their tables and a caption.
  cat "$tmp/scale-streams.md" <(echo) scripts/benchdoc/streams.md "$tmp/scale-rebuild.md" <(echo) scripts/benchdoc/rebuild.md \
    "$tmp/scale-propagation.md" "$tmp/scale-admin.md" <(echo) scripts/benchdoc/adminload.md - >"$tmp/scale.md" <<'EOF'

### Why the scale targets stand where they do

These notes come from profiles taken while the figures above were brought down (issue 22); wall
times on this shared two-core machine run two to five times the CPU they measure.

- **SSE streams.** An open stream holds four goroutines in the proxy (its server connection, the
  net/http read that watches for the client leaving, the transport's read and write loops to the
  upstream): 8 + 2 + 4 + 4 KB of stack by their dumped addresses, about 26 KB of stack memory per
  stream at the sample (the rest is not attributed; freed stacks of the 2,000 short-lived dial
  goroutines are a guess). Live-heap profiles (the proxy's `/debug/pprof/heap` with `PROXY_DEBUG_PPROF=true`, idle against all open)
  showed the upstream transport's two 32 KB bufio buffers were 64 of about 80 KB live per stream:
  they are now 4 KB each, and an event stream waits for its next event with a 1 KB buffer,
  taking a pooled 4 KB one only while a burst lasts (`TestRelayStreamsLargeEventsAndBursts`). Go
  heap in use per stream fell from about 91 to 33 KB and RSS per stream from 64–65 to 59–60 KB over
  six runs. (A 1 KB write buffer took 3 KB more off, but cost every request with a body of 0.6 to
  3 KB a second write: not taken.) At GOGC=100 one run gave 58 KB: allocation per stream is now close to what stays
  live, so the collector's setting is not what sets this figure. The added time to first event is
  queueing: 2,000 connections opened at once, with the simulator and the load generator on the
  same two cores.
- **Snapshot rebuild.** Before this work a build alone took 2.2 s and 270 MB at this size: each of
  the 10,000 principals got its own list of 1,000 candidate upstreams. Lists are now shared by pin
  set and the build fills its key maps on two goroutines (`BenchmarkBuildAtScale`). A full rebuild
  is mostly reading 61,000 rows, so a change no longer costs one: each change logs what it touched
  (`config_changes`, docs/decisions.md "Incremental snapshot rebuilds"), a rebuild reads the
  touched rows only and applies them to the previous snapshot, sharing the rest; full rebuilds
  remain on the first load, when the change log cannot vouch for the span, and every 5 minutes.
  The full read runs on up to four connections in one state (`TestLoadConfigKeysBesideIsOneState`).
  Profiles before the last pass: on SQLite 110 ms of CPU per rebuild, of which the keys 40 ms
  (about 800 ns and 7 allocations a row, each modernc column call taking a mutex), chain entries
  21 ms, principals and upstreams 23 ms, the build 10 ms, the rest garbage collection. Now: the
  keys come back as one joined row (`group_concat`) per half of the table, each half on a
  connection of its own (row by row if an id holds the separator, `TestLoadConfigKeys`); on
  PostgreSQL keys, principals and chain entries are read through pgx itself inside the transaction
  that imported the exported snapshot, without database/sql's per-column conversion; rows are
  scanned without a heap allocation each (743k to 291k allocations a rebuild on SQLite); and the
  benchmark runs under bin/proxy's collector setting (GOGC=400), as the runtime's rebuilds do.
  Since then principals and chain entries are read the way the keys are (one joined row per
  table, one reader for all three, `sqlstore/joined.go`; row by row when a value holds the
  separator or would not decode exactly as the plain read does, `TestJoinedReadIsThePlainRead`),
  and on PostgreSQL key ids are made one string per 1,024 keys and times decoded by pgx into the
  rows: CPU per rebuild 88 to 74 ms on SQLite, 47.5 to 42 ms on PostgreSQL, allocations 291k to 90k
  and 382k to 161k (`BenchmarkRebuildAtScale`, six runs each, loaded machine). What is left on
  SQLite is the key query inside the engine (about 18 ms, `group_concat` growing its string among
  it), the two other tables (9–11 ms each), filling the snapshot's key maps (8.5 ms); on
  PostgreSQL pgx's string per text column and the server's own CPU on the same two cores.
- **Propagation at scale.** A change costs two rebuilds in series (replica A before it answers the
  admin call, then B on NOTIFY), now both incremental: the tail left is the scheduling of the two
  proxies, the simulator and the load generator on two shared cores.
- **Admin API under load.** Concurrent admin writes now share rebuilds: a refresh that arrives
  while one runs waits for the next and returns with it (`Runtime.Refresh`,
  `TestConcurrentRefreshesShareOneRebuild`), so eight writers cost about two rebuilds, not eight.
  The proxy path takes no lock and makes no database call (one snapshot pointer load; usage events
  are queued); what raises its p99 is CPU. Profiles through bin/proxy's `/debug/pprof/` (the
  profile tops are in bin/artifacts/bench/adminload-profile.md) and execution traces showed, on
  SQLite, proxied requests waiting for a processor behind admin goroutines running the SQLite engine
  (in process: modernc is pure Go) and the rebuild; admin writes and their rebuilds now run in a
  lane of GOMAXPROCS − 1 slots (docs/operations.md), which took the proxy path's processor waits
  from p99 1.1–4.4 ms to about 70 µs in those traces. Statement parsing (`sqlite3RunParser`, a
  quarter of the proxy's CPU) was next: the store now prepares each statement once and re-uses it
  on SQLite (`TestStatementsParsedOnce`), so an admin create and patch and the delta read they
  cause take 0.51–0.58 ms of CPU instead of 0.86–0.97 (`BenchmarkAdminWrites`, prepared and
  unprepared in one process, three runs). PostgreSQL keeps pgx's own statement cache (the store's
  on top only added allocations); there a configuration change records itself (audit row,
  generation bump, change log, NOTIFY) in one statement instead of four
  (`TestChangeRecordedInOneStatement`): a create is 6 round trips with BEGIN and COMMIT instead
  of 9, a patch 5 instead of 8. What is left on SQLite is the rebuild applying each delta
  (`store.Config.Apply` copies and re-merges every principal and chain entry, hashing each id: a
  fifth of the proxy's CPU at 4,000 principals), the WAL writes of each commit, and HTTP. The
  traces now show the proxy path's goroutines waiting for a processor for microseconds: its tail
  is the machine's. The admin clients write as fast as answers come, the lane keeps one core busy
  and the load generator and the simulator share the other with the proxy path, so cheaper writes
  raise writes per second more than they lower the proxy's p99. On PostgreSQL the proxy does not
  wait inside its own process either. A replica spent about a third of its CPU in the system
  calls of round trips: a delta read was 8 of them. It is now one pipelined round trip (BEGIN,
  the statements, COMMIT as one pgx batch, `TestDeltaReadIsOneRoundTrip`, `BenchmarkDeltaRead`),
  which halved a listening replica's CPU per change (0.59 to 0.34 ms, a replica taking no writes measured alone; replicas B and C in the CPU table give that cost plus their share of admin calls);
  what is left there is `store.Config.ApplyWithoutKeys` copying every principal and chain entry
  (a fifth of that CPU). The three replicas, the server, the simulator and the load generator
  still fill both cores, so the table now has a control: a bare reverse proxy measured in turns
  with replica A. In six runs of 2,000 to 6,000 writes on this machine, replica A's p99 grew
  2.0–5.1x under the PostgreSQL load and the control's 1.4–3.8x; A's loaded p99 was 1.4–1.8x the
  control's: the rest of A's growth is the admin work it runs itself. The SQLite lane extended to
  PostgreSQL (writes and refreshes, or refreshes alone; seven runs) cut admin throughput by up to a
  fifth
  and left A's p99 against the control at 1.3–1.5x, within the spread of the runs without it, so
  PostgreSQL keeps no lane.
EOF
fi

# The Go commands start, wait for and stop the processes they measure
# (through conformance/harness/runner), each logging into a temporary
# directory that goes with them.
step "load: gateway vs bare reverse proxy (c=1 latency, time to first event, throughput); loadgen starts the simulator, the gateway, the baseline and its control"
commit=$(git describe --always --dirty 2>/dev/null || echo unknown)
"$tmp/loadgen" --bin-dir bin --bareproxy "$tmp/bareproxy" \
  --n "${BENCH_N:-5000}" --stream-n "${BENCH_STREAM_N:-5000}" --throughput-n "${BENCH_THROUGHPUT_N:-10000}" \
  --commit "$commit" --out "$tmp/overhead.md" \
  --interleaved-n "${BENCH_INTERLEAVED_N:-25000}" --interleaved-out "$tmp/interleaved.md" \
  --dialect-n "${BENCH_DIALECT_N:-5000}" --dialect-out "$tmp/dialect.md" \
  --bedrock-n "${BENCH_BEDROCK_N:-2000}" --bedrock-out "$tmp/bedrock.md"
printf '\nLoad average when the step ended: %s (figures from a loaded two-core machine).\n' "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$tmp/bedrock.md"

# Issue 24: the tail of the interleaved series explained. The same series
# against tracedproxy (bin/proxy with a Go execution trace of its run); the
# gateway's slowest 1% are matched against what its goroutines and the GC
# were doing meanwhile.
step "tail of the interleaved series: what the gateway was doing during its slowest 1% (execution trace)"
"$tmp/loadgen" --bin-dir bin --bareproxy "$tmp/bareproxy" --tail-proxy "$tmp/tracedproxy" \
  --interleaved-n "${BENCH_TAIL_N:-2000}" --tail-out "$tmp/tail.md"

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
go test -run '^$' -bench 'ScanRequest1MB|ScanRequestTypical|SSETap' -benchmem -count 1 ./impl/gateway/relay/ | tee -a "$tmp/micro.txt"
go test -run '^$' -bench Admit -benchmem -count 1 ./impl/gateway/limits/ | tee -a "$tmp/micro.txt"
# issue 23 (h/ops): the proxy path with a limited principal (anthropic-ratelimit-* headers) and
# the metrics on, beside the plain path; allocs/op is the stable figure on a busy machine.
go test -run '^$' -bench 'BenchmarkRelay(LimitedWithMetrics)?$' -benchmem -benchtime 2000x -count 1 ./impl/gateway/relay/ | tee -a "$tmp/micro.txt"
# issue 37 (h/traces): the same path with OpenTelemetry tracing on, sampling 1 % and 100 %,
# exported over OTLP/gRPC to a receiver on loopback.
go test -run '^$' -bench 'BenchmarkRelayTraced' -benchmem -benchtime 2000x -count 1 ./impl/gateway/relay/ | tee -a "$tmp/micro.txt"
# issue 24 (h/evwriter): one write of the request-event writer on SQLite, by events per
# transaction (it writes every 50 ms); cpu-ns/op is the burst beside the requests.
go test -run '^$' -bench InsertRequestEvents -benchmem -benchtime 500x -count 1 ./impl/gateway/store/sqlite/ | tee -a "$tmp/micro.txt"
# issue 22.5 (h/adminsql): an admin client's create and patch of a principal and the delta read
# they cause, in the store; on SQLite with the statements prepared (as it runs) and unprepared (as
# before), on PostgreSQL with pgx's statement cache alone (as it runs) and with the store's too.
go test -run '^$' -bench AdminWrites -benchmem -benchtime 300x -count 1 ./impl/gateway/store/sqlite/ | tee -a "$tmp/micro.txt"
if [ -z "${BENCH_SKIP_POSTGRES:-}" ]; then
  TEST_DATABASE_URL=$pgurl go test -run '^$' -bench AdminWrites -benchmem -benchtime 300x -count 1 ./impl/gateway/store/postgres/ | tee -a "$tmp/micro.txt"
fi
# issue 22.5 (h/pgdelta): the delta read every replica runs on every change notification, on
# PostgreSQL batched in one round trip (as it runs) and statement by statement (as before): this
# process's CPU, the server backend's (server-cpu-ns/op) and round trips per read.
if [ -z "${BENCH_SKIP_POSTGRES:-}" ]; then
  TEST_DATABASE_URL=$pgurl go test -run '^$' -bench DeltaRead -benchmem -benchtime 3000x -count 1 ./impl/gateway/store/postgres/ | tee -a "$tmp/micro.txt"
fi
# issue 24 (h/tail): one 32-event write's thread CPU over 4000 writes (p50, p99, max): the write
# that crosses wal_autocheckpoint pages also checkpoints (1000, the default; 100; 0 = never).
go test -run '^$' -bench FlushTail -benchtime 4000x -count 1 ./impl/gateway/store/sqlite/ | tee -a "$tmp/micro.txt"

step "router plugin cost (the pin router in WebAssembly text, metered, and in Go) and the proxy path with a one-plugin chain"
# Three rounds, medians in the doc (benchtable); then the proxy path with the
# built-in router, with a one-plugin chain and with a second built-in path
# (the noise floor), in rotating rounds in one process, for each of the two
# sample pin routers.
for _ in 1 2 3; do
  go test -run '^$' -bench 'BenchmarkRoute(WAT|WATChecked|V1)?$|BenchmarkCallFloor$' -benchmem -benchtime 20000x -count 1 ./impl/gateway/plugins/
  go test -run '^$' -bench 'BenchmarkRelay(RouterPlugin|RouterPluginWAT)?$' -benchmem -benchtime 20000x -count 1 ./impl/gateway/relay/
done | tee "$tmp/plugins.txt"
go run ./conformance/bench/cmd/routercost --plugin bin/plugins/pinrouterwat.wasm --n "${BENCH_ROUTER_N:-50000}" --out "$tmp/routercost.md"
go run ./conformance/bench/cmd/routercost --plugin bin/plugins/pinrouter.wasm --n "${BENCH_ROUTER_N:-50000}" --out "$tmp/routercost-go.md"
cut -d' ' -f1-3 /proc/loadavg >"$tmp/plugins-load.txt"

step "routing across accounts: a Claude-Code-shaped workload through the built-in router (routingbench)"
go run ./conformance/bench/cmd/routingbench --out "$tmp/routing.md"
cut -d' ' -f1-3 /proc/loadavg >"$tmp/routing-load.txt"

if [ -z "${BENCH_SKIP_POSTGRES:-}" ]; then
  step "scheduler job throughput (SQLite and PostgreSQL)"
  TEST_DATABASE_URL=$pgurl go test -run '^$' -bench JobThroughput -benchtime 3000x -count 1 ./impl/gateway/scheduler/ | tee "$tmp/jobs.txt"
fi

# pillar-csi agent (issue 22.6): a self-contained step writing its own
# section; agentbench starts bin/pillar-agent-sim on simulated storage.
step "pillar-csi agent: CreateVolume on simulated LVM and ZFS, the mTLS empty call (agentbench)"
go build -trimpath -ldflags '-s -w' -o "$tmp/agentbench" ./conformance/bench/cmd/agentbench
"$tmp/agentbench" --bin-dir bin --n "${BENCH_AGENT_N:-50}" --rtt-n "${BENCH_AGENT_RTT_N:-3000}" --out "$tmp/agent-table.md"
{
  echo "## pillar-csi agent: CreateVolume and the gRPC round trip"
  echo
  echo 'bin/pillar-agent-sim on simulated storage (an LVM volume group with a thin pool, a second one for linear'
  echo 'volumes, a ZFS pool), its storage tools being processes of the same binary as in the kind e2e, measured by'
  echo '`conformance/bench/cmd/agentbench` over mTLS on one reused connection: 50 creates of new 32 MiB volumes'
  echo 'one at a time per pool, and 3000 empty calls (the gRPC health check, which touches no storage) against'
  echo 'the same call on a plaintext agent, in turns of 100. "CPU a call" is the agent'"'"'s and its tool processes'"'"' CPU time'
  echo '(/proc) over the creates: the machine'"'"'s other load moves it far less than the wall-clock figures.'
  echo
  cat "$tmp/agent-table.md"
  echo
  cat <<'EOF2'
Where the time goes: a simulated tool call is a process start of pillar-agent-sim (the Go runtime and the
initialisation of everything linked into the agent) plus the simulated host's state file read under a lock;
that start is most of it, so a CreateVolume costs about its number of tool calls. Measured once by CPU time
over 50 runs of the same vgs: /bin/true 1 ms a run, bin/fakestorage 5.5 ms, pillar-agent-sim 10 ms (its
170 package initialisers: gRPC, protobuf, Prometheus; GODEBUG=inittrace=1), while the simulated command
itself, in process (`BenchmarkRun`, sim/storagetools), costs 0.35 ms for a report. The backends therefore run
as few as the answer needs: lvcreate (or zfs create) first, whose own refusals (name taken, space short) are
the answer, and a clean LVM success is the whole answer (lvcreate says when it rounds a size up); the LVM
extent size is the only thing kept between calls, read again when lvcreate rounds or a size disagrees and
dropped when the group is gone. ZFS reads the new volume back (zfs rounds to a volblocksize that depends on
the version). Before this (commit 75bfb58) a thin create ran vgs, lvs, lvcreate, lvs, a linear one those
and blkdiscard and lvchange, a ZFS one zfs list, zfs create, zfs list, and every report rewrote the simulated
state. Two paired runs of agentbench against that commit's pillar-agent-sim on this machine (2026-11-25,
load average near 28): CPU a create, LVM thin 36.6 and 32.5 ms before, 8.1 and 7.5 ms after; LVM linear 56.0
and 55.3 against 26.6 and 21.5 ms; ZFS 28.9 and 34.2 against 17.7 and 16.2 ms; p50 wall clock thin 49.0 and
38.3 against 8.7 and 8.2 ms, ListPools 100 and 86 against 36 and 33 ms. ListPools, which the controller asks
before every create, reads each pool's reports once (LVM: vgs and the thin pool's lvs; ZFS: zpool list and
one zfs list) and asks the pools at once. The empty call's p99 swings with the machine's load on either
transport (above 1 ms in some runs of both); its p50, about 0.1 ms, is the steady figure.
EOF2
  # The real kernel's figures come from the last make e2e-kernel run's
  # console (its guest tests print PILLAR-BENCH lines); none without one.
  kconsole=bin/artifacts/kernel/console.log
  if [ -f "$kconsole" ] && go run ./conformance/bench/cmd/kernelbench "$kconsole" >"$tmp/kernel.md" 2>/dev/null; then
    echo
    echo "Beside them, the same calls on the real kernel under qemu (\`make e2e-kernel\` of $(date -u -r "$kconsole" '+%Y-%m-%d %H:%M UTC'):"
    echo "real LVM thin pool and ZFS on virtio disks, nvme-tcp over loopback, in a TCG-emulated guest, so several"
    echo 'times slower than hardware; `csi-*` rows are the CSI calls through pillar-controller and pillar-node, whose'
    echo 'CreateVolume includes the ListPools readiness check; NodeStage connects, formats and mounts; its'
    echo 'simulated counterpart, on loop devices, is the kind section'"'"'s NodeStageVolume row):'
    echo
    cat "$tmp/kernel.md"
    echo
    echo "The guest's tests make each call once or a few times, so these are single samples, not percentiles."
  else
    echo
    echo 'No real-kernel figures: bin/artifacts/kernel/console.log of a `make e2e-kernel` run with PILLAR-BENCH lines is missing.'
  fi
} >"$tmp/pillar-agent.md"
cat "$tmp/pillar-agent.md"

if [ -z "${BENCH_SKIP_KIND:-}" ]; then
  step "pillar-csi on kind: PVC-to-Bound and pod-to-Running (scripts/e2e-kind.sh --bench)"
  bash scripts/e2e-kind.sh --bench
  cp bin/artifacts/kind/bench.md "$tmp/kind-bench.md"
  cat "$tmp/kind-bench.md"
fi

{
  cat "$tmp/overhead.md"
  echo
  cat scripts/benchdoc/overhead.md
  echo
  cat "$tmp/interleaved.md"
  echo
  cat scripts/benchdoc/interleaved.md
  echo
  cat "$tmp/dialect.md"
  echo
  cat scripts/benchdoc/dialect.md
  echo
  # Hand-written notes on the dialect gap, kept across runs.
  cat scripts/benchdoc/dialect-notes.md
  echo
  cat "$tmp/bedrock.md"
  echo
  cat scripts/benchdoc/bedrock.md
  echo
  cat "$tmp/tail.md"
  echo
  cat scripts/benchdoc/tail.md
  echo
  cat <<'EOF'
### What the tail was, and what removed it (issue 24)

Found with the breakdown above, run on the build before the fix and after it. Before (commit 75bfb58), the
gateway's slowest 1% of non-streaming requests overlapped the usage recorder in 65–67% of cases
(9–20% of all its requests did), by 545–737 µs on average, and it was their largest overlap in
15–53%: every request woke the recorder goroutine, and every 200 ms it wrote the batch with one
`INSERT` per row in pure-Go SQLite, each statement also starting a driver goroutine to watch its
context (about 1 ms of CPU and ~70 goroutine wake-ups per flush at this rate). Three changes take it
off the request's way: the batch is written in multi-row `INSERT`s (one statement per 256 events);
`Record` appends to a buffer without waking the writer, which takes the buffer on its 200 ms tick or
as soon as 256 events wait, so the crash bound of docs/operations.md ("Crash windows") is unchanged
and its fault-suite test still holds; and token counts are read by an allocation-free scanner
(encoding/json stays as the reference and the fallback, a fuzz test holds the two equal). Next in
line were the collector's mark phases (in a run with the writer fixed and GOGC still 100,
runtime.gcBgMarkWorker was the largest overlap of 35% of the slowest 1% and overlapped 1% of all
requests): bin/proxy now runs with `GOGC=400` unless `GOGC` is set
(docs/operations.md, "Garbage collection"). A non-streaming answer is also flushed to the client
before the metrics and the usage hand-off instead of when the handler returns.

After the fix the recorder overlaps 3–17% of the slowest 1% and the GC 0–10%; what dominates them
(67–83%) is the gateway's own request goroutines runnable but not running: the process's threads
waiting for a core. On this shared 2-core machine (load average 24–38 during these runs) that CPU
starvation moves single p99 figures by more than the 10% being checked, as the noise column shows
(two identical bareproxy processes differ by 0.64–1.55x at p99 across runs): the p99 ratio could
not be verified to 1.1x here in either direction, while the medians agree within 1–12%.

Since then (issue 24, second pass) the event INSERTs are prepared once per batch shape instead of
parsed every flush (parsing was a third of a flush's CPU), and the writer writes what is queued every
50 ms in a small transaction rather than once per 200 ms, within the same 200 ms / 256-event bound
(a crash now loses at most the last 50 ms). A third pass: a stream's headers go out
with its first event in one write, as a stock reverse proxy sends them, instead of being flushed
alone first, which cost the client a second wake-up (`TestStreamHeadersGoOutWithFirstEvent`; time
to first event p50 0.86–0.91x of bare against 0.93–1.02x before, six interleaved A/B runs with
the control path a gateway of the other build). With 5,000 rounds
a run, six runs on a quiet machine gave p99 ratios of 0.96–1.18x (median 1.04x) for latency and
0.95–1.25x (median 1.06x) for time to first event, against noise floors of 0.70–1.23x: single
runs of that length cannot tell 1.1x from 1.0x, so make bench now pools 25,000 rounds and prints
the spread of five blocks under the table. The traced run (2,000 rounds, the execution trace
itself costing the gateway time) stays above the target; what its slowest 1% overlap is the
gateway's own goroutines waiting for a processor on the two shared cores, the recorder's flush
and the collector.
EOF
  cat "$tmp/propagation.md"
  cat "$tmp/scale.md"
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
in a 1 MB prompt, `BenchmarkScanRequestTypical` the same in a 2 KB body with the nine top-level keys
an SDK sends; `BenchmarkSSETap` is the usage tap's work on a 16-event stream read one event
at a time. `BenchmarkAdmit` (in `impl/gateway/limits`) is the `default_limits` check of a
principal with a request and a token limit, from GOMAXPROCS goroutines.

`BenchmarkProxyPathTracing` is `BenchmarkProxyPath`'s two proxies again, beside the gateway with
OpenTelemetry tracing on (docs/tracing.md), sampling 1 % and 100 % of requests and exporting over
OTLP/gRPC, batched as bin/proxy exports, to a receiver on loopback in the same process: its
cpu-ns/op counts the export and the receiver's decoding, so it bounds tracing's CPU from above.
`BenchmarkRelayTraced` (in `impl/gateway/relay`) does the same beside `BenchmarkRelay`. Tracing
off is the plain `gateway` rows: the hooks are nil checks and allocate nothing.
EOF
  echo
  # Hand-written notes on the routing state and tracing figures, kept across runs.
  cat scripts/benchdoc/micro-notes.md
  echo
  echo "## Routing across accounts (issue 33)"
  echo
  echo 'A workload shaped like Claude Code through the built-in router (`relay.Handler` with the routing board, the'
  echo 'session table and admission as bin/proxy wires them, in one process) in front of three simulated accounts'
  echo 'whose per-minute request limits the simulator enforces (`conformance/bench/cmd/routingbench`). Counts and'
  echo 'ratios, not latencies: the figures depend on how the concurrent sessions interleave, so they move a little'
  echo "from run to run. Load average when the step ended: $(cat "$tmp/routing-load.txt")."
  echo
  cat "$tmp/routing.md"
  echo
  cat <<'EOF'
*Cache read share*: prompt tokens read from the provider's cache over all prompt tokens of the
successful answers. *Follow-ups on the same account*: requests of a session served by the account
that served its previous one. *Sent to a cooling account*: requests the proxy sent to an account its
board said was cooling down when it sent them (the 429s the accounts answered were all in flight
when the first of them came back). *Spread vs weights*: the largest deviation of an account's share
from its weight's share. The strict order keeps follow-ups together too, but only by putting
everything on one account until it is rate limited: its spread is the whole load on the first.
EOF
  echo
  echo "## Router plugins"
  echo
  echo 'Target: a router plugin call < 5 µs; the proxy path with a one-plugin chain <= 1.05x the built-in router.'
  echo 'Per call of the sample pin router under ABI v2: written in WebAssembly text and run metered'
  echo '(`BenchmarkRouteWAT`, impl/gateway/plugins), the same module under wazero'"'"'s termination checks instead'
  echo '(`BenchmarkRouteWATChecked`), the Go sample (`BenchmarkRoute`) and the floor under it (`BenchmarkCallFloor`:'
  echo 'an empty export of the Go module through the watchdog and termination checks), the same choice by an ABI v1'
  echo 'module (`BenchmarkRouteV1`, JSON per call), and the in-process proxy path with the built-in router'
  echo '(`BenchmarkRelay`) and with a one-plugin chain (`BenchmarkRelayRouterPluginWAT`, `BenchmarkRelayRouterPlugin`).'
  echo '`cpu-ns/op` is the process'"'"'s CPU time per call, every goroutine included (wazero'"'"'s watchers too):'
  echo
  "$tmp/benchtable" <"$tmp/plugins.txt"
  echo
  for b in RouteWAT Route; do
    route_ns=$(awk -v b="^Benchmark$b-" '$1 ~ b {print $3}' "$tmp/plugins.txt" | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
    route_met=met; awk -v ns="$route_ns" 'BEGIN {exit !(ns >= 5000)}' && route_met='**missed**'
    echo "Router plugin call (\`Benchmark$b\`, median): ${route_ns} ns against a target of < 5000 ns: ${route_met}."
  done
  echo "Load average when the step ended: $(cat "$tmp/plugins-load.txt") (wall-clock figures on a loaded machine are a multiple of the CPU cost)."
  echo
  echo 'The proxy path (`relay.Handler.ServeHTTP`, in-memory provider, no network) with the built-in router and'
  echo 'with the pin router after it, and over loopback HTTP, in one process (`conformance/bench/cmd/routercost`),'
  echo 'first with the WebAssembly text router (metered), then with the Go one. A second built-in path runs in the'
  echo 'same rotation as a control: its ratio to the first is the noise floor of the run, and a ratio over the'
  echo 'target by no more than the floor'"'"'s distance from 1 is marked "within noise" (the run cannot tell it from met):'
  echo
  cat "$tmp/routercost.md"
  echo
  cat "$tmp/routercost-go.md"
  echo
  cat <<'EOF'
A call binds nothing and starts nothing: the chain entry was bound once per snapshot (config and
upstream table delivered to each instance once), an idle configured instance is taken from the
binding's hot slot (one atomic swap; a channel holds the rest of the pool), a binary record goes
into the buffer the guest keeps, and the answer is read in place; our side allocates nothing.

wazero v1.12 starts a watcher goroutine for every call of a module compiled with termination checks
(`CloseModuleOnCanceledOrTimeout`), and a Go module pays its exported-function entry on top. Two
changes remove both from the sample router's call: the router is also written in WebAssembly text
(`fixtures/plugins/pinrouterwat`, ABI v2, no guest runtime, about 2 KB), and modules that import
nothing and use only instructions of known cost run **metered** (`impl/gateway/plugins/fuel`): the
module is rewritten so that every function entry and every loop iteration pays for its instructions
from a counter the host sets before each call, and traps when it is spent; such modules run in a
second wazero runtime without termination checks, so no goroutine is started. A guest loop is still
interrupted (by its fuel: one unit per instruction, half the call timeout in nanoseconds), and
counted as a timeout. Modules that import anything (every Go module imports WASI) keep the checks and
the watchdog. Of the metered call's remaining CPU, the two monotonic clock reads of
`svc_plugin_call_duration_seconds` were about a third: an ABI v2 router call is timed on a sample,
one call in 8 of each instance (docs/plugins.md; `svc_plugin_calls_total` counts every call). The
reaper's stop flag is read from a Go atomic rather than the guest's global, and a metered call no
longer searches the instance's context. A dynamic chain's leading built-in routers, and the candidate
indexes its first plugin is offered, are computed with the snapshot (`snapshot.Lead`); a plugin's
choice of one upstream, of consecutive ones or of the offer unchanged is a window of the snapshot's
list: the request path allocates nothing to route (`TestRouteOnePluginAllocatesNothing`). Together
these took the metered call from about 160 to 100 CPU ns (`RouteWAT`) and the relay's routing of a
one-plugin request from about 220 to 120 ns in a tight loop, 340 to 220 ns after a request's worth of
other work has been through the caches (timed by experiment, not a benchmark). What remains of the
in-process gap (about 0.3 µs at p50) is that call into wazero amid the request's other work: an empty
metered export alone costs about 70 ns there, against 20 ns in a tight loop. The in-process tail
(p98 and up) is heavier while the garbage collector runs: with `GOGC=off` the p99 ratio fell from
about 1.4x to 1.1x on the same machine, presumably because a GC cycle evicts the lines the call
touches. Over loopback the gap is within the noise of an HTTP exchange. ABI v1 modules still run,
at the old cost (`RouteV1`).
Chains with only built-in routers pay nothing per request (precomputed at snapshot build).
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
  echo
  cat "$tmp/pillar-agent.md"
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

`CreateVolume` here is the controller's: the `ListPools` readiness check, then the agent's create,
every storage tool call a process start of pillar-agent-sim inside the kind node. Up to commit 75bfb58
that was ten tool processes one after another on this chart's two pools (LVM thin: vgs, lvs, lvs; ZFS:
zpool list, zfs list, zfs list; the create: vgs, lvs, lvcreate, lvs); since then it is five, of which
three wait on each other (the two pools' two reports each asked at once, then one lvcreate). The agent
section above measures the agent's part alone.
EOF
  fi
} >"$tmp/benchmarks.md"
mv "$tmp/benchmarks.md" docs/benchmarks.md
step "wrote docs/benchmarks.md"
