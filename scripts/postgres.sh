#!/usr/bin/env bash
# A throwaway local PostgreSQL for tests, without Docker. Idempotent: reuses a
# running server. Prints the connection URL as its last line on stdout.
#   scripts/postgres.sh         start (or reuse) and print the URL
#   scripts/postgres.sh stop    stop it
# PILLAR_PG_PORT picks the port (55432); the cluster lives in
# $PILLAR_CACHE/pg-test, owned by the postgres OS user (the server refuses to
# run as root). Trust authentication, listening on 127.0.0.1 only.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"

port=${PILLAR_PG_PORT:-55432}
dir=$PILLAR_CACHE/pg-test
bin=$(pg_bindir)
url="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"

if [ ! -x "$bin/initdb" ] || [ ! -x "$bin/postgres" ]; then
  step "installing PostgreSQL server binaries"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends postgresql >/dev/null
  bin=$(pg_bindir)
fi
id postgres >/dev/null 2>&1 || as_root useradd --system --create-home postgres
run_pg() { if [ "$(id -un)" = postgres ]; then "$@"; elif [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else sudo -u postgres "$@"; fi; }

if [ "${1:-}" = stop ]; then
  if [ -d "$dir/data" ]; then run_pg "$bin/pg_ctl" -D "$dir/data" -m fast stop >/dev/null 2>&1 || true; fi
  exit 0
fi

if run_pg "$bin/pg_isready" -q -h 127.0.0.1 -p "$port" 2>/dev/null; then
  note "PostgreSQL already running on 127.0.0.1:$port"
  echo "$url"
  exit 0
fi

as_root mkdir -p "$dir"
as_root chown postgres "$dir"
# The cache directory's parents must let the postgres user reach it.
d=$dir; while [ "$d" != / ]; do as_root chmod o+x "$d" 2>/dev/null || true; d=$(dirname "$d"); done
if [ ! -f "$dir/data/PG_VERSION" ]; then
  step "initdb $dir/data"
  run_pg rm -rf "$dir/data"
  run_pg "$bin/initdb" -D "$dir/data" -U postgres -A trust --no-sync >/dev/null
fi
step "starting PostgreSQL on 127.0.0.1:$port"
run_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
  -o "-p $port -c listen_addresses=127.0.0.1 -k $dir -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
  start >/dev/null || { tail -20 "$dir/server.log" >&2; die "PostgreSQL did not start"; }
echo "$url"
