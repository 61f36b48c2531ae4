#!/bin/sh
# Initialise the cluster on first start (user `nel`, database `dagster`), then run Postgres
# in the foreground on 127.0.0.1:$PGPORT. Started as root: the mounted data directory is
# handed to the postgres user first (a fresh bind mount belongs to root).
set -eu
if [ "$(id -u)" = 0 ]; then
  mkdir -p "$PGDATA"
  chown -R postgres:postgres "$(dirname "$PGDATA")"
  exec runuser -u postgres -- "$0" "$@"
fi
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  initdb -D "$PGDATA" -U postgres --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
  psql -v ON_ERROR_STOP=1 -U postgres -c "CREATE USER nel PASSWORD '${NEL_PG_PASSWORD:-nel}'" \
       -c "CREATE DATABASE dagster OWNER nel" >/dev/null
  pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
fi
exec postgres -D "$PGDATA" -c listen_addresses=127.0.0.1 -c port="${PGPORT:-5432}"
