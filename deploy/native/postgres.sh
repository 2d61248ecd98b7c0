#!/usr/bin/env bash
# PostgreSQL from the OS packages, run natively on 127.0.0.1.
#
#   deploy/native/postgres.sh install|start|stop|status|restart|destroy
#
# The data dir cannot live in the repo (the repo may sit in a root-only folder
# and initdb/postgres refuse to run as root), so it lives in
#   /var/tmp/threadline-<first 8 hex of sha1(repo path)>/pg
# owned by the `postgres` OS user, with the unix socket and the server log in
# the same folder; .run/logs/postgres.log is a symlink to that log.
# Role and database `threadline` (password `threadline`) are created on start.
# Every command is idempotent; `destroy` stops the server and deletes its data.
#
# Env: THREADLINE_PG_PORT (15432), THREADLINE_PG_BINDIR (auto: /usr/lib/postgresql/15/bin)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PG_MAJOR=15
PORT="${THREADLINE_PG_PORT:-15432}"
HOST=127.0.0.1
BASE="$DATA_BASE"
PGDATA="$BASE/pg"
PGLOG="$BASE/postgres.log"
PIDFILE="$RUN_DIR/postgres.pid"   # a copy of the postmaster's pid, for `make ps`
DB_USER=threadline DB_PASS=threadline DB_NAME=threadline

# As root, the server and its tools run as the `postgres` OS user.
if [[ $(id -u) -eq 0 ]]; then
  PG_OS_USER=postgres
  # (from / : the repo may be a folder the postgres user cannot enter)
  as_pg() { (cd / && runuser -u postgres -- "$@" 9>&-); }
else
  PG_OS_USER="$(id -un)"
  as_pg() { "$@" 9>&-; }   # 9>&-: the server must not inherit with_lock's fd
fi

find_bindir() {
  local d
  for d in "${THREADLINE_PG_BINDIR:-}" "/usr/lib/postgresql/$PG_MAJOR/bin"; do
    [[ -n "$d" && -x "$d/initdb" && -x "$d/postgres" ]] && { echo "$d"; return 0; }
  done
  return 1
}

install() {
  find_bindir >/dev/null && return 0
  if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
    die "PostgreSQL $PG_MAJOR server not found; install postgresql-$PG_MAJOR or set THREADLINE_PG_BINDIR"
  fi
  log "installing postgresql-$PG_MAJOR with apt-get"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "postgresql-$PG_MAJOR" >/dev/null
  find_bindir >/dev/null || die "postgresql-$PG_MAJOR installed but its binaries were not found"
}

pg_running() { as_pg "$BIN/pg_ctl" status -D "$PGDATA" >/dev/null 2>&1; }
postmaster_pid() { head -n1 "$PGDATA/postmaster.pid" 2>/dev/null || true; }

init_cluster() {
  [[ -f "$PGDATA/PG_VERSION" ]] && return 0
  log "initdb in $PGDATA"
  rm -rf "$PGDATA"
  as_pg "$BIN/initdb" -D "$PGDATA" -U postgres -E UTF8 --no-locale \
    --auth-local=trust --auth-host=scram-sha-256 >"$BASE/initdb.log" 2>&1 ||
    { cat "$BASE/initdb.log" >&2; die "initdb failed"; }
}

# Create (or repair) the application role and database over the unix socket.
ensure_db() {
  "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$BASE" -p "$PORT" -U postgres -d postgres >/dev/null <<SQL
DO \$\$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$DB_USER') THEN
    CREATE ROLE $DB_USER LOGIN CREATEDB PASSWORD '$DB_PASS';
  ELSE
    ALTER ROLE $DB_USER LOGIN CREATEDB PASSWORD '$DB_PASS';
  END IF;
END \$\$;
SELECT 'CREATE DATABASE $DB_NAME OWNER $DB_USER'
 WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = '$DB_NAME') \gexec
SQL
}

start() {
  install
  BIN="$(find_bindir)"
  mkdir -p "$BASE" "$LOG_DIR"
  chown "$PG_OS_USER" "$BASE" && chmod 0755 "$BASE"
  ln -sfn "$PGLOG" "$LOG_DIR/postgres.log"
  if [[ -f "$PGDATA/PG_VERSION" ]] && pg_running; then
    postmaster_pid >"$PIDFILE"
    log "already running (pid $(postmaster_pid)) on $HOST:$PORT"
    return 0
  fi
  if port_open "$HOST" "$PORT"; then
    die "port $PORT is already taken by another process (another clone's PostgreSQL? stop it first, or set THREADLINE_PG_PORT)"
  fi
  init_cluster
  log "starting PostgreSQL on $HOST:$PORT (data: $PGDATA)"
  # Settings are passed on the command line so a changed port takes effect.
  as_pg "$BIN/pg_ctl" start -D "$PGDATA" -l "$PGLOG" -w -t 60 -o \
    "-c port=$PORT -c listen_addresses=$HOST -c unix_socket_directories=$BASE -c max_connections=200" \
    >/dev/null || { tail -n 20 "$PGLOG" >&2; die "PostgreSQL did not start"; }
  postmaster_pid >"$PIDFILE"
  ensure_db || die "could not create role/database $DB_NAME"
  log "ready (pid $(postmaster_pid)): postgresql://$DB_USER:$DB_PASS@$HOST:$PORT/$DB_NAME"
}

stop() {
  rm -f "$PIDFILE"
  BIN="$(find_bindir)" || return 0
  [[ -f "$PGDATA/PG_VERSION" ]] && pg_running || return 0
  log "stopping PostgreSQL (pid $(postmaster_pid))"
  as_pg "$BIN/pg_ctl" stop -D "$PGDATA" -m fast -w -t 30 >/dev/null ||
    as_pg "$BIN/pg_ctl" stop -D "$PGDATA" -m immediate -w -t 30 >/dev/null
}

status() {  # one line: name pid state; exit 0 only when running
  local pid
  if BIN="$(find_bindir)" && [[ -f "$PGDATA/PG_VERSION" ]] && pg_running; then
    pid="$(postmaster_pid)"
    printf '%-28s %-8s %s\n' postgres "$pid" "alive  $HOST:$PORT"
  else
    printf '%-28s %-8s %s\n' postgres - stopped; return 1
  fi
}

destroy() {
  stop
  log "removing $BASE"
  rm -rf "$BASE" "$LOG_DIR/postgres.log"
}

[[ "${1:-}" == status ]] || with_lock postgres
case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  status) status ;;
  destroy) destroy ;;
  *) echo "usage: $0 install|start|stop|restart|status|destroy" >&2; exit 2 ;;
esac
