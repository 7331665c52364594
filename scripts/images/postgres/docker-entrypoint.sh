#!/bin/bash
# Entrypoint of pillar/postgres. On first start it initialises $PGDATA, then it
# replaces itself with postgres (PID 1, in the foreground, logging to stderr) so
# signals from `docker stop` reach the server directly.
#
#   POSTGRES_PASSWORD         empty: trust for every client; set: the superuser's
#                             password, required over TCP (scram-sha-256)
#   POSTGRES_USER             superuser name (default postgres)
#   POSTGRES_DB               database created on first start (default $POSTGRES_USER)
#   POSTGRES_HOST_AUTH_METHOD pg_hba method for TCP clients (overrides the above)
#   POSTGRES_MAX_CONNECTIONS  max_connections (default 100)
#   POSTGRES_FSYNC            fsync (default on)
#   POSTGRES_INITDB_ARGS      extra initdb arguments
#   /docker-entrypoint-initdb.d/*.sql|*.sql.gz|*.sh  run once, after initdb
#
# Arguments: none, `postgres [ARGS]` or `-c name=value ...` start the server with
# those extra arguments (later -c settings win); anything else is run as a command.
#
# "database system is ready to accept connections" appears in the container's
# log exactly once per start, when TCP clients can connect: the set-up server of
# a first start logs to a file instead (unlike the Docker Hub image, so wait for
# the first occurrence, not the second).
set -Eeuo pipefail

export PGDATA=${PGDATA:-/var/lib/postgresql/data}
[ $# -gt 0 ] || set -- postgres
[ "${1#-}" = "$1" ] || set -- postgres "$@"
[ "$1" = postgres ] || exec "$@"
shift

max_connections=${POSTGRES_MAX_CONNECTIONS:-100}
case $max_connections in
  '' | *[!0-9]*) echo "docker-entrypoint: POSTGRES_MAX_CONNECTIONS must be a number, got '$max_connections'" >&2; exit 1 ;;
esac
fsync=${POSTGRES_FSYNC:-on}

if [ "$(id -u)" = 0 ]; then
  mkdir -p "$PGDATA" /var/run/postgresql
  # Only what is not already the postgres user's, so a large mounted data
  # directory does not cost a full walk on every start.
  find "$PGDATA" /var/run/postgresql \! -user postgres -exec chown postgres:postgres {} +
  chmod 700 "$PGDATA"
  # setpriv execs (no intermediate process), so postgres still ends up PID 1.
  exec setpriv --reuid=postgres --regid=postgres --init-groups "${BASH_SOURCE[0]}" postgres "$@"
fi

run_sql() { psql -v ON_ERROR_STOP=1 --no-psqlrc --quiet --username "$user" --dbname "${1:-postgres}"; }

if [ ! -s "$PGDATA/PG_VERSION" ]; then
  user=${POSTGRES_USER:-postgres}
  db=${POSTGRES_DB:-$user}
  pwargs=()
  if [ -n "${POSTGRES_PASSWORD:-}" ]; then
    method=${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}
    pwfile=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
    pwargs=(--pwfile="$pwfile")
  else
    method=${POSTGRES_HOST_AUTH_METHOD:-trust}
  fi
  # --no-sync: test databases are throwaway; skipping the flush saves start-up time.
  # shellcheck disable=SC2086 # POSTGRES_INITDB_ARGS is a list of words by design
  initdb --no-sync --username="$user" --encoding=UTF8 --locale=C.UTF-8 \
    --auth-local=trust --auth-host="$method" "${pwargs[@]}" ${POSTGRES_INITDB_ARGS:-} >&2
  [ -z "${pwfile:-}" ] || rm -f "$pwfile"
  printf '\n# Clients reach the container through its network interface.\nhost all all all %s\n' "$method" >>"$PGDATA/pg_hba.conf"

  # A socket-only server for the set-up steps: TCP clients never see a
  # half-initialised database. Its log goes to a file (shown if set-up fails)
  # so the ready line in the container's log always means "ready for TCP".
  setup_log=$(mktemp)
  trap 'echo "docker-entrypoint: set-up failed; its server log:" >&2; cat "$setup_log" >&2' ERR
  pg_ctl --silent --wait --timeout=60 --log="$setup_log" -o "-c listen_addresses='' -p 5432" start
  if [ "$db" != postgres ]; then
    run_sql <<<"CREATE DATABASE \"${db//\"/\"\"}\";"
  fi
  for f in /docker-entrypoint-initdb.d/*; do
    case $f in
      *.sh)
        echo "docker-entrypoint: running $f" >&2
        # shellcheck disable=SC1090 # the user's own scripts
        if [ -x "$f" ]; then "$f"; else . "$f"; fi
        ;;
      *.sql) echo "docker-entrypoint: running $f" >&2; run_sql "$db" <"$f" ;;
      *.sql.gz) echo "docker-entrypoint: running $f" >&2; gunzip -c "$f" | run_sql "$db" ;;
    esac
  done
  pg_ctl --silent --wait --mode=fast stop
  trap - ERR
  rm -f "$setup_log"
  echo "docker-entrypoint: initialisation done; starting PostgreSQL" >&2
fi

exec postgres -c listen_addresses='*' -c max_connections="$max_connections" -c fsync="$fsync" "$@"
