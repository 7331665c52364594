#!/bin/sh
# PID 1 of the PostgreSQL image: initialise on first start, then run the
# server in the foreground as the postgres user (setpriv execs, so signals
# reach postgres directly).
set -eu
PGBIN=/usr/lib/postgresql/15/bin
PGDATA=${PGDATA:-/var/lib/postgresql/data}
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  mkdir -p "$PGDATA"
  chown -R postgres:postgres "$PGDATA"
  auth=trust
  if [ -n "${POSTGRES_PASSWORD:-}" ]; then
    printf '%s\n' "$POSTGRES_PASSWORD" > /tmp/pwfile
    chown postgres /tmp/pwfile
    auth=scram-sha-256
    setpriv --reuid=postgres --regid=postgres --init-groups "$PGBIN/initdb" -D "$PGDATA" -U postgres --pwfile=/tmp/pwfile -A "$auth" >/dev/null
    rm -f /tmp/pwfile
  else
    setpriv --reuid=postgres --regid=postgres --init-groups "$PGBIN/initdb" -D "$PGDATA" -U postgres -A trust >/dev/null
  fi
  echo "host all all 0.0.0.0/0 $auth" >> "$PGDATA/pg_hba.conf"
  echo "host all all ::/0 $auth" >> "$PGDATA/pg_hba.conf"
fi
mkdir -p /var/run/postgresql && chown postgres:postgres /var/run/postgresql
exec setpriv --reuid=postgres --regid=postgres --init-groups "$PGBIN/postgres" -D "$PGDATA" \
  -c listen_addresses='*' -c max_connections="${POSTGRES_MAX_CONNECTIONS:-100}" -c fsync="${POSTGRES_FSYNC:-on}"
