#!/usr/bin/env bash
# Start (installing Debian's `postgresql` first if needed) a private Postgres server for a
# shared Dagster instance: its own cluster under $NEL_POSTGRES_DIR, listening on 127.0.0.1
# only, with a role and a database for Dagster. Idempotent: when the server already answers
# it only re-checks and returns (well under a second).
#
# Prints `export NEL_DAGSTER_POSTGRES_URL=postgresql+psycopg2://...` on stdout (eval it); every
# `nel` process with that variable set (or `nel config set dagster_postgres_url ...`), and
# `dagster dev` on a home with deploy/dagster/dagster-postgres.yaml, record into this one
# instance. The driver is named because dagster-postgres speaks psycopg2 only.
# Env:
#   NEL_POSTGRES_DIR         data, logs and socket (default /var/lib/nel-postgres)
#   NEL_POSTGRES_PORT        TCP port on 127.0.0.1 (default 25432: below Linux's ephemeral
#                            range 32768-60999, where any outgoing connection may hold it)
#   NEL_POSTGRES_NO_INSTALL=1  never run apt-get (the package must be there)
# Needs root (the server itself runs as the `postgres` user, which Debian's package creates).
set -euo pipefail

D=${NEL_POSTGRES_DIR:-/var/lib/nel-postgres}
PORT=${NEL_POSTGRES_PORT:-25432}
USER_NAME=nel
PASSWORD=nel
DB=dagster
URL="postgresql+psycopg2://$USER_NAME:$PASSWORD@127.0.0.1:$PORT/$DB"
say() { echo "[nel postgres] $*" >&2; }

mkdir -p "$D"
# One start at a time (xdist workers each start it from their own fixture); the server gets
# `9>&-` so it never holds the lock's descriptor for its whole life.
exec 9>"$D/.start.lock"
flock -w 1500 9 || { say "another start_postgres.sh held $D/.start.lock for 25 minutes"; exit 1; }

bindir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }
if [[ -z "$(bindir)" || ! -x "$(bindir)/initdb" ]] && [[ "${NEL_POSTGRES_NO_INSTALL:-0}" != 1 ]]; then
  say "installing postgresql"
  apt=(apt-get -o DPkg::Lock::Timeout=600 -y -q --no-install-recommends)
  DEBIAN_FRONTEND=noninteractive "${apt[@]}" install postgresql >/dev/null 2>&1 \
    || { apt-get -o DPkg::Lock::Timeout=600 -q update >/dev/null \
         && DEBIAN_FRONTEND=noninteractive "${apt[@]}" install postgresql >/dev/null; }
fi
B=$(bindir)
[[ -n "$B" && -x "$B/initdb" ]] || { say "no Postgres binaries under /usr/lib/postgresql/*/bin"; exit 1; }
as_pg() { runuser -u postgres -- "$@"; }
sql() { as_pg "$B/psql" -h "$D/run" -p "$PORT" -d postgres -XqAt -v ON_ERROR_STOP=1 -c "$1"; }
ready() { as_pg "$B/pg_isready" -q -h "$D/run" -p "$PORT" 2>/dev/null; }

# The fast path: up and the role exists.
if ready && [[ "$(sql "SELECT 1 FROM pg_roles WHERE rolname='$USER_NAME'" 2>/dev/null)" == 1 ]]; then
  say "already up"; echo "export NEL_DAGSTER_POSTGRES_URL=$URL"; exit 0
fi

mkdir -p "$D/data" "$D/run" "$D/log"
chown postgres:postgres "$D/data" "$D/run" "$D/log"
chmod 0700 "$D/data"
if [[ ! -s "$D/data/PG_VERSION" ]]; then
  say "creating the cluster in $D/data"
  as_pg "$B/initdb" -D "$D/data" -A scram-sha-256 --auth-local=peer -U postgres \
    >"$D/log/initdb.log" 2>&1 \
    || { tail -20 "$D/log/initdb.log" >&2; exit 1; }
fi
if ! ready && as_pg "$B/pg_ctl" -D "$D/data" status >/dev/null 2>&1; then
  # Running on this cluster but not answering on $PORT: started with another port (an older
  # default, or NEL_POSTGRES_PORT changed). Ours alone, so it is restarted on $PORT.
  say "the server of $D/data listens elsewhere; restarting it on 127.0.0.1:$PORT"
  as_pg "$B/pg_ctl" -D "$D/data" -w -t 120 -m fast stop >/dev/null 9>&- \
    || { say "could not stop the running server of $D/data"; exit 1; }
fi
if ! ready; then
  say "starting postgres on 127.0.0.1:$PORT"
  # A stale pid file from a killed server would stop pg_ctl: postgres itself checks the pid.
  as_pg "$B/pg_ctl" -D "$D/data" -l "$D/log/postgres.log" -w -t 120 start \
    -o "-c listen_addresses=127.0.0.1 -p $PORT -k $D/run -c max_connections=200 -c fsync=on" \
    >/dev/null 9>&- || { tail -20 "$D/log/postgres.log" >&2; exit 1; }
fi
for _ in $(seq 300); do ready && break; sleep 0.1; done
ready || { say "postgres did not become ready:"; tail -20 "$D/log/postgres.log" >&2; exit 1; }
if [[ "$(sql "SELECT 1 FROM pg_roles WHERE rolname='$USER_NAME'")" != 1 ]]; then
  sql "CREATE ROLE $USER_NAME LOGIN CREATEDB PASSWORD '$PASSWORD'"
fi
if [[ "$(sql "SELECT 1 FROM pg_database WHERE datname='$DB'")" != 1 ]]; then
  sql "CREATE DATABASE $DB OWNER $USER_NAME"
fi
say "up: $URL"
echo "export NEL_DAGSTER_POSTGRES_URL=$URL"
