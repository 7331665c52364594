#!/usr/bin/env bash
# make demo: the provider sim and the proxy on loopback, an upstream, a
# principal and a key created through the admin API, then real requests.
# KEEP=1 leaves the sim and the proxy running afterwards (and their data
# directory), so the dashboard shows the demo's traffic.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

tmp=$(mktemp -d)
pids=()
keep=${KEEP:-}
cleanup() {
  if [ -n "$keep" ] && [ "${done_ok:-}" = 1 ]; then return; fi
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])' 2>/dev/null || echo $((20000 + RANDOM % 20000)); }
sim_port=$(free_port); proxy_port=$(free_port); admin_port=$(free_port)
token="demo-admin-$(date +%s)"
sim_key="sk-sim-demo"

step "starting the provider sim on 127.0.0.1:$sim_port"
bin/sim --listen "127.0.0.1:$sim_port" --api-key "$sim_key" >"$tmp/sim.out" 2>"$tmp/sim.log" </dev/null &
pids+=($!)
step "starting the proxy (proxy 127.0.0.1:$proxy_port, admin 127.0.0.1:$admin_port, database $tmp/demo.db)"
PROXY_ADMIN_TOKEN=$token bin/proxy --proxy-listen "127.0.0.1:$proxy_port" --admin-listen "127.0.0.1:$admin_port" \
  --database-url "sqlite://$tmp/demo.db" --allow-private-upstreams >"$tmp/proxy.out" 2>"$tmp/proxy.log" </dev/null &
pids+=($!)
admin="http://127.0.0.1:$admin_port/admin/v1"
for _ in $(seq 1 100); do
  curl -fsS -H "Authorization: Bearer $token" "$admin/status" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -fsS -H "Authorization: Bearer $token" "$admin/status" >/dev/null || { cat "$tmp/proxy.log"; die "proxy did not start"; }

api() { # method path [body]
  curl -sS -X "$1" -H "Authorization: Bearer $token" -H 'Content-Type: application/json' ${3:+--data "$3"} "$admin$2"
}
field() { sed -n "s/.*\"$1\":\"\([^\"]*\)\".*/\1/p" | head -1; }

step "POST /admin/v1/upstreams (vendor_api_key → the sim)"
up=$(api POST /upstreams "{\"name\":\"sim\",\"kind\":\"vendor_api_key\",\"base_url\":\"http://127.0.0.1:$sim_port\",\"api_key_value\":\"$sim_key\"}")
echo "$up"
step "POST /admin/v1/principals"
pr=$(api POST /principals '{"name":"demo-app","kind":"machine","allowed_models":["claude-*"]}')
echo "$pr"
pid=$(echo "$pr" | field id)
step "POST /admin/v1/principals/$pid/keys (the plaintext key is shown once)"
key=$(api POST "/principals/$pid/keys" '{"name":"demo"}' | field key)
echo "key: ${key:0:12}… (hidden)"

step "POST /v1/messages through the proxy"
curl -sS "http://127.0.0.1:$proxy_port/v1/messages" -H "x-api-key: $key" -H 'anthropic-version: 2023-06-01' \
  -H 'content-type: application/json' \
  -d '{"model":"claude-sonnet-4-5","max_tokens":32,"messages":[{"role":"user","content":"Hello from the demo"}]}'
echo
step "the same request, streaming"
curl -sSN "http://127.0.0.1:$proxy_port/v1/messages" -H "Authorization: Bearer $key" -H 'anthropic-version: 2023-06-01' \
  -H 'content-type: application/json' \
  -d '{"model":"claude-sonnet-4-5","max_tokens":32,"stream":true,"messages":[{"role":"user","content":"Hello again"}]}'
step "a model outside allowed_models is refused"
curl -sS "http://127.0.0.1:$proxy_port/v1/messages" -H "x-api-key: $key" -H 'anthropic-version: 2023-06-01' \
  -H 'content-type: application/json' -d '{"model":"gpt-4o","max_tokens":8,"messages":[]}'
echo
step "a few more requests, so the dashboard has traffic to show"
for i in 1 2 3 4 5; do
  curl -sS -o /dev/null "http://127.0.0.1:$proxy_port/v1/messages" -H "x-api-key: $key" -H 'anthropic-version: 2023-06-01' \
    -H 'content-type: application/json' -d "{\"model\":\"claude-haiku-4-5\",\"max_tokens\":16,\"messages\":[{\"role\":\"user\",\"content\":\"ping $i\"}]}"
done
if [ -n "$keep" ]; then
  done_ok=1
  step "demo done; the sim and the proxy keep running (KEEP=1)"
  cat <<EOT
  dashboard   http://127.0.0.1:$admin_port/dashboard/   (admin token: $token)
  proxy       http://127.0.0.1:$proxy_port/v1/messages
  data        $tmp
  stop them:  kill ${pids[*]} && rm -rf $tmp
EOT
  exit 0
fi
step "demo done; everything was on loopback and is being stopped"
