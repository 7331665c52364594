#!/usr/bin/env bash
# make bench: the gateway against a bare reverse proxy on the same provider
# simulator, plus Go micro-benchmarks of the relay. Writes docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

step "building the baseline and the load generator"
go build -o "$tmp/bareproxy" ./conformance/bench/cmd/bareproxy
go build -o "$tmp/loadgen" ./conformance/bench/cmd/loadgen

port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
sim=127.0.0.1:$(port); px=127.0.0.1:$(port); adm=127.0.0.1:$(port); bare=127.0.0.1:$(port)
key=sk-sim-bench; token=bench-$(date +%s)

bin/sim --listen "$sim" --api-key "$key" 2>"$tmp/sim.log" & pids+=($!)
PROXY_ADMIN_TOKEN=$token bin/proxy --proxy-listen "$px" --admin-listen "$adm" --database-url "sqlite://$tmp/bench.db" --log-level warn 2>"$tmp/proxy.log" & pids+=($!)
"$tmp/bareproxy" --listen "$bare" --target "http://$sim" --api-key "$key" 2>"$tmp/bare.log" & pids+=($!)
for _ in $(seq 1 100); do curl -fsS -H "Authorization: Bearer $token" "http://$adm/admin/v1/status" >/dev/null 2>&1 && break; sleep 0.1; done

api() { curl -fsS -X POST -H "Authorization: Bearer $token" -H 'Content-Type: application/json' --data "$2" "http://$adm/admin/v1$1"; }
api /upstreams "{\"name\":\"sim\",\"kind\":\"vendor_api_key\",\"base_url\":\"http://$sim\",\"api_key_value\":\"$key\"}" >/dev/null
pid=$(api /principals '{"name":"bench","kind":"machine","allowed_models":["*"]}' | sed -n 's/.*"id":"\([^"]*\)".*/\1/p' | head -1)
pkey=$(api "/principals/$pid/keys" '{}' | sed -n 's/.*"key":"\([^"]*\)".*/\1/p' | head -1)
[ -n "$pkey" ] || die "could not issue a key: $(cat "$tmp/proxy.log")"

step "load: gateway vs bare reverse proxy (alternating)"
"$tmp/loadgen" --proxy "http://$px" --proxy-key "$pkey" --bare "http://$bare" --n "${BENCH_N:-5000}" \
  --commit "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" --out "$tmp/overhead.md"

step "replica propagation on PostgreSQL"
pgurl=$(bash scripts/postgres.sh)
schema=bench_$(date +%s)
psql -q "$pgurl" -c "CREATE SCHEMA $schema" >/dev/null
dburl="${pgurl}&search_path=$schema"
master=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
pa=127.0.0.1:$(port); aa=127.0.0.1:$(port); pb=127.0.0.1:$(port); ab=127.0.0.1:$(port)
for r in "$pa $aa" "$pb $ab"; do
  set -- $r
  PROXY_ADMIN_TOKEN=$token PROXY_MASTER_KEY=$master bin/proxy --proxy-listen "$1" --admin-listen "$2" --database-url "$dburl" --log-level warn 2>>"$tmp/replicas.log" & pids+=($!)
done
for a in $aa $ab; do for _ in $(seq 1 100); do curl -fsS -H "Authorization: Bearer $token" "http://$a/admin/v1/status" >/dev/null 2>&1 && break; sleep 0.1; done; done
go build -o "$tmp/propagation" ./conformance/bench/cmd/propagation
PROXY_ADMIN_TOKEN=$token "$tmp/propagation" --admin-a "http://$aa" --proxy-b "http://$pb" --sim "http://$sim" --sim-key "$key" \
  --n "${BENCH_PROPAGATION_N:-200}" --out "$tmp/overhead.md"
PGOPTIONS=--client-min-messages=warning psql -q "$pgurl" -c "DROP SCHEMA $schema CASCADE" >/dev/null

step "micro-benchmarks of the relay"
go test -run '^$' -bench . -benchmem -count 1 ./impl/gateway/relay/ | tee "$tmp/micro.txt"
step "scheduler job throughput (SQLite and PostgreSQL)"
TEST_DATABASE_URL=$pgurl go test -run '^$' -bench JobThroughput -benchtime 3000x -count 1 ./impl/gateway/scheduler/ | tee "$tmp/jobs.txt"

{
  cat "$tmp/overhead.md"
  echo
  echo "## Relay micro-benchmarks (in-process, no network)"
  echo
  echo '```'
  grep -E '^(Benchmark|cpu:)' "$tmp/micro.txt"
  echo '```'
  echo
  echo '`BenchmarkRelay` is one full proxied request through `relay.Handler` with an in-memory upstream;'
  echo '`BenchmarkScanRequest1MB` is the top-level scan for `model` and `stream` in a 1 MB prompt.'
  echo
  echo "## Scheduler job throughput"
  echo
  echo '3 000 no-op jobs enqueued, then drained by one scheduler with 64 workers (enqueue to done):'
  echo
  echo '```'
  grep -E '^Benchmark' "$tmp/jobs.txt"
  echo '```'
} > docs/benchmarks.md
step "wrote docs/benchmarks.md"
