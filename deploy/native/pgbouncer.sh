#!/usr/bin/env bash
# PgBouncer from the OS packages in front of the native PostgreSQL, in transaction pooling mode
# (case C24: the services must work behind it).
#
#   deploy/native/pgbouncer.sh install|start|stop|status|restart
#
# Listens on 127.0.0.1:$THREADLINE_PGBOUNCER_PORT and forwards every database name (`* =`) to
# 127.0.0.1:$THREADLINE_PG_PORT (with a standby: the primary's port), `pool_mode=transaction`,
# `default_pool_size` server connections per database/user pair. Users: `threadline` (password `threadline`, as postgres.sh creates it).
# PgBouncer refuses to run as root, so as root it runs as the `postgres` OS user; its config,
# pid file and log live in /var/tmp/threadline-<hash of repo path>/pgbouncer (beside the
# PostgreSQL data of postgres.sh); .run/logs/pgbouncer.log links to the log.
# Every command is idempotent. Not part of `make infra-up`: the C24 test starts it.
#
# Env: THREADLINE_PGBOUNCER_PORT (THREADLINE_PG_PORT + 1000: 16432 beside 15432, so checkouts
#      with their own PostgreSQL port get their own PgBouncer port), THREADLINE_PG_PORT (15432),
#      THREADLINE_PGBOUNCER_POOL_SIZE (2)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PG_PORT="${THREADLINE_PG_PORT:-15432}"
PORT="${THREADLINE_PGBOUNCER_PORT:-$((PG_PORT + 1000))}"
# With a standby (postgres.sh, THREADLINE_PG_STANDBY=1) it forwards to whichever server is the
# primary now; `postgres.sh promote` restarts a running PgBouncer so that it follows the promotion.
TARGET_PORT="$PG_PORT"
if [[ -f "$DATA_BASE/primary" && "$(cat "$DATA_BASE/primary")" == pg2 ]]; then
  TARGET_PORT="${THREADLINE_PG_STANDBY_PORT:-$((PG_PORT + 1))}"
fi
POOL_SIZE="${THREADLINE_PGBOUNCER_POOL_SIZE:-2}"
HOST=127.0.0.1
BASE="$DATA_BASE/pgbouncer-$PORT"
CONFIG="$BASE/pgbouncer.ini"
USERLIST="$BASE/userlist.txt"
PIDFILE="$BASE/pgbouncer.pid"
LOGFILE="$BASE/pgbouncer.log"

if [[ $(id -u) -eq 0 ]]; then
  OS_USER=postgres
  as_user() { (cd / && runuser -u postgres -- "$@" 9>&-); }
else
  OS_USER="$(id -un)"
  as_user() { "$@" 9>&-; }
fi

find_bin() {
  local b
  for b in "${THREADLINE_PGBOUNCER_BIN:-}" /usr/sbin/pgbouncer "$(command -v pgbouncer 2>/dev/null || true)"; do
    [[ -n "$b" && -x "$b" ]] && { echo "$b"; return 0; }
  done
  return 1
}

install() {
  find_bin >/dev/null && return 0
  if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
    die "pgbouncer not found; install the pgbouncer package or set THREADLINE_PGBOUNCER_BIN"
  fi
  log "installing pgbouncer with apt-get"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >/dev/null
  # Debian's package may start its own instance (port 6432, /etc/pgbouncer); ours is separate.
  find_bin >/dev/null || die "pgbouncer installed but its binary was not found"
}

running_pid() {
  local pid
  pid="$(read_pid "$PIDFILE")"
  pid_alive "$pid" && echo "$pid"
}

write_config() {
  mkdir -p "$BASE" "$LOG_DIR"
  cat >"$USERLIST" <<EOF
"threadline" "threadline"
EOF
  cat >"$CONFIG" <<EOF
[databases]
* = host=$HOST port=$TARGET_PORT

[pgbouncer]
listen_addr = $HOST
listen_port = $PORT
unix_socket_dir =
auth_type = scram-sha-256
auth_file = $USERLIST
pool_mode = transaction
default_pool_size = $POOL_SIZE
min_pool_size = 0
reserve_pool_size = 0
max_client_conn = 1000
max_db_connections = 0
server_reset_query =
ignore_startup_parameters = extra_float_digits,options,search_path
pidfile = $PIDFILE
logfile = $LOGFILE
log_connections = 0
log_disconnections = 0
admin_users = threadline
EOF
  chown -R "$OS_USER" "$BASE"
  chmod 0700 "$BASE"
  ln -sfn "$LOGFILE" "$LOG_DIR/pgbouncer.log"
}

start() {
  install
  local bin pid i
  bin="$(find_bin)"
  if pid="$(running_pid)"; then
    log "already running (pid $pid) on $HOST:$PORT"
    return 0
  fi
  if port_open "$HOST" "$PORT"; then
    die "port $PORT is already taken by another process (set THREADLINE_PGBOUNCER_PORT)"
  fi
  write_config
  log "starting PgBouncer on $HOST:$PORT -> $HOST:$TARGET_PORT (pool_mode=transaction, default_pool_size=$POOL_SIZE)"
  as_user "$bin" -d "$CONFIG" >/dev/null 2>&1 || { tail -n 20 "$LOGFILE" >&2 || true; die "PgBouncer did not start"; }
  for ((i = 0; i < 100; i++)); do
    port_open "$HOST" "$PORT" && { log "ready (pid $(running_pid || echo ?))"; return 0; }
    sleep 0.1
  done
  tail -n 20 "$LOGFILE" >&2 || true
  die "PgBouncer did not open $HOST:$PORT"
}

stop() {
  local pid
  pid="$(running_pid)" || return 0
  stop_pid "$pid" pgbouncer 15
}

status() {
  local pid
  if pid="$(running_pid)"; then
    printf '%-28s %-8s %s\n' pgbouncer "$pid" "alive  $HOST:$PORT"
  else
    printf '%-28s %-8s %s\n' pgbouncer - stopped; return 1
  fi
}

[[ "${1:-}" == status ]] || with_lock "pgbouncer-$PORT"
case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  status) status ;;
  *) echo "usage: $0 install|start|stop|restart|status" >&2; exit 2 ;;
esac
