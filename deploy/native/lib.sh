# Shared helpers for deploy/native/*.sh (sourced, not run).
# shellcheck disable=SC2034  # the variables below are used by the scripts that source this
# Paths: everything a run leaves behind lives under $RUN_DIR (.run/ in the repo, or
# THREADLINE_RUN_DIR: a second cluster of the same checkout, on other ports, as `make test`'s
# serial part uses), except PostgreSQL's data, which must be readable by the `postgres` OS user
# and lives in $DATA_BASE under /var/tmp (one folder per checkout and run dir).

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)"
RUN_DIR="${THREADLINE_RUN_DIR:-$REPO_ROOT/.run}"
DATA_BASE="/var/tmp/threadline-$(printf '%s' "${THREADLINE_RUN_DIR:-$REPO_ROOT}" | sha1sum | cut -c1-8)"
LOG_DIR="$RUN_DIR/logs"
PID_DIR="$RUN_DIR/pids"
PY="${PY:-$REPO_ROOT/.venv/bin/python}"

log() { printf '[%s] %s\n' "$(basename "$0" .sh)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# pid_alive PID -> 0 when PID is a live (non-zombie) process
pid_alive() {
  local pid="$1" state
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  state="$(ps -o stat= -p "$pid" 2>/dev/null || true)"
  [[ -n "$state" && "$state" != Z* ]]
}

# read_pid FILE -> prints the pid stored in FILE (empty when none)
read_pid() { if [[ -f "$1" ]]; then head -n1 "$1" 2>/dev/null | tr -dc '0-9'; fi; }

# port_open HOST PORT -> 0 when something accepts TCP connections there
port_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

# stop_pid PID NAME TIMEOUT: SIGTERM, wait up to TIMEOUT seconds, then SIGKILL.
stop_pid() {
  local pid="$1" name="$2" timeout="${3:-15}" i
  pid_alive "$pid" || return 0
  log "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < timeout * 10; i++)); do
    pid_alive "$pid" || return 0
    sleep 0.1
  done
  log "$name (pid $pid) still alive after ${timeout}s: SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do pid_alive "$pid" || return 0; sleep 0.1; done
}

# spawn PIDFILE LOGFILE CMD...: run CMD detached (own session, stdin closed),
# output appended to LOGFILE; the pid of CMD itself is written to PIDFILE.
spawn() {
  local pidfile="$1" logfile="$2"; shift 2
  mkdir -p "$(dirname "$pidfile")" "$(dirname "$logfile")"
  rm -f "$pidfile"
  printf '==== %s start: %s\n' "$(date '+%F %T')" "$*" >>"$logfile"   # logs are appended
  # shellcheck disable=SC2016  # $$ and $@ belong to the inner bash
  setsid bash -c 'echo $$ > "$1"; shift; exec "$@"' spawn "$pidfile" "$@" \
    </dev/null >>"$logfile" 2>&1 9>&- &   # 9: with_lock's fd, must not outlive us
  local i
  for ((i = 0; i < 50; i++)); do [[ -s "$pidfile" ]] && return 0; sleep 0.05; done
  die "could not start: $*"
}

# with_lock NAME: serialize this script's commands across processes (e.g. two test
# sessions running `make infra-up` at once); released when the script exits.
with_lock() {
  mkdir -p "$RUN_DIR"
  exec 9>"$RUN_DIR/$1.lock"
  flock -w 300 9 || die "timed out waiting for $RUN_DIR/$1.lock"
}
