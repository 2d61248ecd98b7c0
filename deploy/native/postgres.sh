#!/usr/bin/env bash
# PostgreSQL from the OS packages, run natively on 127.0.0.1, alone or with a standby.
#
#   deploy/native/postgres.sh install|start|stop|status|restart|destroy|promote|rejoin
#
# The data dir cannot live in the repo (the repo may sit in a root-only folder
# and initdb/postgres refuse to run as root), so it lives in
#   /var/tmp/threadline-<first 8 hex of sha1(repo path)>/pg
# owned by the `postgres` OS user, with the unix socket and the server log in
# the same folder; .run/logs/postgres.log is a symlink to that log.
# Role and database `threadline` (password `threadline`) are created on start.
# Every command is idempotent; `destroy` stops the server and deletes its data.
#
# With THREADLINE_PG_STANDBY=1 (`make up PG_STANDBY=1`) a second server, `pg2` on
# THREADLINE_PG_STANDBY_PORT (port + 1), is a streaming-replication standby made with
# pg_basebackup, and synchronous: the primary acknowledges a commit once the standby has it
# on disk (synchronous_standby_names = 'ANY 1 (threadline_pg, threadline_pg2)'). Clients
# name both servers, postgresql://…@127.0.0.1:15432,127.0.0.1:15433/threadline?target_session_attrs=read-write
# (docs/operations.md, "A PostgreSQL standby"). Which server is the primary is kept in
# $BASE/primary (`pg` or `pg2`), so a stopped former primary never starts as one again:
#   promote  the failover an operator or a managed service makes: stop the primary (fast
#            shutdown: its last WAL goes to the standby), promote the standby, and let it
#            commit without a standby until one rejoins; prints the seconds it took.
#   rejoin   make the other server a standby of the primary again (a fresh pg_basebackup);
#            `start` does it too for a server that is not the primary and no standby.
# A pair, once made, stays a pair (its commands act on both servers, whatever the variable).
#
# Env: THREADLINE_PG_PORT (15432), THREADLINE_PG_BINDIR (auto: /usr/lib/postgresql/15/bin),
#      THREADLINE_PG_STANDBY (0), THREADLINE_PG_STANDBY_PORT (THREADLINE_PG_PORT + 1)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PG_MAJOR=15
PORT="${THREADLINE_PG_PORT:-15432}"
PORT2="${THREADLINE_PG_STANDBY_PORT:-$((PORT + 1))}"
HOST=127.0.0.1
BASE="$DATA_BASE"
PGDATA="$BASE/pg"
PGLOG="$BASE/postgres.log"
PIDFILE="$RUN_DIR/postgres.pid"   # a copy of the postmaster's pid, for `make ps`
PRIMARY_FILE="$BASE/primary"      # with a standby: which server is the primary (pg or pg2)
DB_USER=threadline DB_PASS=threadline DB_NAME=threadline
SYNC_NAMES="ANY 1 (threadline_pg, threadline_pg2)"

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

# The two servers of a pair: `pg` (the first, THREADLINE_PG_PORT) and `pg2` (the standby port).
node_dir() { echo "$BASE/$1"; }
node_port() { if [[ $1 == pg ]]; then echo "$PORT"; else echo "$PORT2"; fi; }
node_log() { if [[ $1 == pg ]]; then echo "$PGLOG"; else echo "$BASE/postgres2.log"; fi; }
node_pidfile() { if [[ $1 == pg ]]; then echo "$PIDFILE"; else echo "$RUN_DIR/postgres2.pid"; fi; }
other() { if [[ $1 == pg ]]; then echo pg2; else echo pg; fi; }

node_running() { as_pg "$BIN/pg_ctl" status -D "$(node_dir "$1")" >/dev/null 2>&1; }
node_pid() { head -n1 "$(node_dir "$1")/postmaster.pid" 2>/dev/null || true; }
pg_running() { node_running pg; }
postmaster_pid() { node_pid pg; }

# paired -> 0 when this data dir holds a primary + standby pair (made with THREADLINE_PG_STANDBY=1)
paired() { [[ -f "$PRIMARY_FILE" ]]; }
want_pair() { [[ "${THREADLINE_PG_STANDBY:-0}" == 1 ]] || paired; }
primary() { if paired; then cat "$PRIMARY_FILE"; else echo pg; fi; }

# sql NODE SQL: run SQL as the superuser over the node's unix socket, print the bare result
sql() { "$BIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$BASE" -p "$(node_port "$1")" -U postgres -d postgres -c "$2"; }

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
  "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$BASE" -p "$(node_port "$(primary)")" -U postgres -d postgres >/dev/null <<SQL
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

# start_node NODE: start one server on its port (settings on the command line, so a changed port
# takes effect; a pair's servers keep WAL for a standby that was away a while).
start_node() {
  local node="$1" dir port logf extra=""
  dir="$(node_dir "$node")" port="$(node_port "$node")" logf="$(node_log "$node")"
  if node_running "$node"; then
    node_pid "$node" >"$(node_pidfile "$node")"
    log "$node already running (pid $(node_pid "$node")) on $HOST:$port"
    return 0
  fi
  if port_open "$HOST" "$port"; then
    die "port $port is already taken by another process (another clone's PostgreSQL? stop it first, or set THREADLINE_PG_PORT)"
  fi
  want_pair && extra=" -c wal_keep_size=512MB -c cluster_name=threadline_$node"
  log "starting PostgreSQL $node on $HOST:$port (data: $dir)"
  as_pg "$BIN/pg_ctl" start -D "$dir" -l "$logf" -w -t 60 -o \
    "-c port=$port -c listen_addresses=$HOST -c unix_socket_directories=$BASE -c max_connections=200$extra" \
    >/dev/null || { tail -n 20 "$logf" >&2; die "PostgreSQL $node did not start"; }
  node_pid "$node" >"$(node_pidfile "$node")"
}

stop_node() {  # stop_node NODE [MODE]: fast shutdown (immediate if that fails)
  local node="$1" dir
  dir="$(node_dir "$node")"
  rm -f "$(node_pidfile "$node")"
  [[ -f "$dir/PG_VERSION" ]] && node_running "$node" || return 0
  log "stopping PostgreSQL $node (pid $(node_pid "$node"))"
  as_pg "$BIN/pg_ctl" stop -D "$dir" -m "${2:-fast}" -w -t 30 >/dev/null ||
    as_pg "$BIN/pg_ctl" stop -D "$dir" -m immediate -w -t 30 >/dev/null
}

# make_standby NODE: replace NODE's data with a base backup of the primary and start it as a
# standby streaming from it (over the unix socket: local replication connections are trusted).
make_standby() {
  local node="$1" from dir
  from="$(primary)" dir="$(node_dir "$1")"
  stop_node "$node"
  log "pg_basebackup of $from into $dir (a standby of $from)"
  rm -rf "$dir"
  as_pg "$BIN/pg_basebackup" -h "$BASE" -p "$(node_port "$from")" -U postgres -D "$dir" -X stream -c fast \
    >"$BASE/basebackup.log" 2>&1 || { cat "$BASE/basebackup.log" >&2; die "pg_basebackup failed"; }
  printf "primary_conninfo = 'host=%s port=%s user=postgres application_name=threadline_%s'\n" \
    "$BASE" "$(node_port "$from")" "$node" | as_pg tee -a "$dir/postgresql.auto.conf" >/dev/null
  as_pg touch "$dir/standby.signal"
  start_node "$node"
}

# synchronous NODE on|off: whether the primary NODE waits for a standby's flush before a commit returns
synchronous() {
  local names=""
  [[ $2 == on ]] && names="$SYNC_NAMES"
  sql "$1" "ALTER SYSTEM SET synchronous_standby_names = '$names'" >/dev/null
  sql "$1" "SELECT pg_reload_conf()" >/dev/null
}

# wait_streaming PRIMARY: until a standby streams from PRIMARY synchronously (60 s)
wait_streaming() {
  local i
  for ((i = 0; i < 600; i++)); do
    [[ "$(sql "$1" "SELECT count(*) FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum')")" -ge 1 ]] && return 0
    sleep 0.1
  done
  die "no synchronous standby streams from $1 after 60 s (see $(node_log "$(other "$1")"))"
}

start() {
  install
  BIN="$(find_bindir)"
  mkdir -p "$BASE" "$LOG_DIR"
  chown "$PG_OS_USER" "$BASE" && chmod 0755 "$BASE"
  ln -sfn "$PGLOG" "$LOG_DIR/postgres.log"
  if ! want_pair; then
    init_cluster
    start_node pg
    ensure_db || die "could not create role/database $DB_NAME"
    log "ready (pid $(postmaster_pid)): postgresql://$DB_USER:$DB_PASS@$HOST:$PORT/$DB_NAME"
    return 0
  fi
  ln -sfn "$BASE/postgres2.log" "$LOG_DIR/postgres2.log"
  paired || { init_cluster; echo pg >"$PRIMARY_FILE"; }
  local p s
  p="$(primary)" s="$(other "$(primary)")"
  start_node "$p"
  ensure_db || die "could not create role/database $DB_NAME"
  if [[ -f "$(node_dir "$s")/standby.signal" ]]; then start_node "$s"; else make_standby "$s"; fi
  synchronous "$p" on
  wait_streaming "$p"
  log "ready: primary $p (pid $(node_pid "$p")), synchronous standby $s (pid $(node_pid "$s")):" \
      "postgresql://$DB_USER:$DB_PASS@$HOST:$PORT,$HOST:$PORT2/$DB_NAME?target_session_attrs=read-write"
}

stop() {
  BIN="$(find_bindir)" || { rm -f "$PIDFILE"; return 0; }
  if paired; then stop_node "$(primary)"; stop_node "$(other "$(primary)")"; else stop_node pg; fi
}

promote() {
  BIN="$(find_bindir)" || die "PostgreSQL is not installed"
  paired || die "no standby here: start the pair with THREADLINE_PG_STANDBY=1 (make up PG_STANDBY=1)"
  local old new t0 ms i
  old="$(primary)" new="$(other "$(primary)")"
  node_running "$new" && [[ -f "$(node_dir "$new")/standby.signal" ]] ||
    die "the standby $new is not running: nothing to promote (deploy/native/postgres.sh rejoin)"
  t0=$(date +%s%N)
  stop_node "$old" fast   # fenced before the standby takes over: never two primaries
  as_pg "$BIN/pg_ctl" promote -D "$(node_dir "$new")" -w -t 60 >/dev/null || die "pg_ctl promote $new failed"
  echo "$new" >"$PRIMARY_FILE"
  synchronous "$new" off  # no standby until one rejoins: commits must not wait for one
  for ((i = 0; i < 600; i++)); do
    [[ "$(sql "$new" "SELECT pg_is_in_recovery()")" == f ]] && break
    sleep 0.1
  done
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  log "promoted $new on $HOST:$(node_port "$new") in $((ms / 1000)).$(printf '%03d' $((ms % 1000))) s;" \
      "$old is stopped (deploy/native/postgres.sh rejoin makes it the standby)"
  if bash "$(dirname "${BASH_SOURCE[0]}")/pgbouncer.sh" status >/dev/null 2>&1; then
    bash "$(dirname "${BASH_SOURCE[0]}")/pgbouncer.sh" restart   # it forwards to the new primary
  fi
}

rejoin() {
  BIN="$(find_bindir)" || die "PostgreSQL is not installed"
  paired || die "no standby here: start the pair with THREADLINE_PG_STANDBY=1 (make up PG_STANDBY=1)"
  node_running "$(primary)" || die "the primary $(primary) is not running"
  make_standby "$(other "$(primary)")"
  synchronous "$(primary)" on
  wait_streaming "$(primary)"
  log "$(other "$(primary)") is the synchronous standby of $(primary) again"
}

status() {  # one line per server: name pid state; exit 0 only when the primary runs
  local node name pid role rc=1
  BIN="$(find_bindir)" || { printf '%-28s %-8s %s\n' postgres - stopped; return 1; }
  for node in pg pg2; do
    [[ $node == pg2 ]] && ! paired && break
    name=postgres; [[ $node == pg2 ]] && name=postgres2
    if [[ -f "$(node_dir "$node")/PG_VERSION" ]] && node_running "$node"; then
      pid="$(node_pid "$node")" role=""
      if paired; then role=" standby"; [[ $node == "$(primary)" ]] && role=" primary"; fi
      printf '%-28s %-8s %s\n' "$name" "$pid" "alive  $HOST:$(node_port "$node")$role"
      [[ $node == "$(primary)" ]] && rc=0
    else
      printf '%-28s %-8s %s\n' "$name" - stopped
    fi
  done
  return $rc
}

destroy() {
  stop
  log "removing $BASE"
  rm -rf "$BASE" "$LOG_DIR/postgres.log" "$LOG_DIR/postgres2.log"
}

[[ "${1:-}" == status ]] || with_lock postgres
case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  status) status ;;
  destroy) destroy ;;
  promote) promote ;;
  rejoin) rejoin ;;
  *) echo "usage: $0 install|start|stop|restart|status|destroy|promote|rejoin" >&2; exit 2 ;;
esac
