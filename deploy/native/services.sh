#!/usr/bin/env bash
# The Threadline services (and the local fake model server), run natively.
#
#   deploy/native/services.sh start|stop|status|restart
#
# Each instance runs `.venv/bin/python -m <module>` in the background with
# THREADLINE_INSTANCE_ID=<service>-<n>, pid in .run/pids/<service>-<n>.pid and
# log in .run/logs/<service>-<n>.log. Instance counts come from the environment:
# N_INGRESS, N_ORCHESTRATORS, N_WORKERS, N_SCHEDULERS, N_GATEWAYS (default 1 each).
# The HTTP gateway (docs/gateway.md) listens on THREADLINE_GATEWAY_PORT (18000) + n - 1, on
# 127.0.0.1; with no API key and no JWT secret configured it runs open (no credentials, every
# resource: local development only), so Studio works at http://127.0.0.1:18000/studio.
# `start` is idempotent, and stops instances beyond the requested count.
# `stop` sends SIGTERM to all, waits up to $STOP_TIMEOUT (15) s, then SIGKILLs.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

STOP_TIMEOUT="${STOP_TIMEOUT:-15}"
MODEL_PORT="${THREADLINE_MODEL_PORT:-18080}"

# Defaults for running this script by hand (the Makefile exports the same).
export THREADLINE_KAFKA_BOOTSTRAP="${THREADLINE_KAFKA_BOOTSTRAP:-127.0.0.1:${THREADLINE_KAFKA_PORT:-19092}}"
export THREADLINE_PG_DSN="${THREADLINE_PG_DSN:-postgresql://threadline:threadline@127.0.0.1:${THREADLINE_PG_PORT:-15432}/threadline}"
export THREADLINE_MODEL_API_BASE="${THREADLINE_MODEL_API_BASE:-http://127.0.0.1:$MODEL_PORT/v1}"
export LITELLM_LOCAL_MODEL_COST_MAP="${LITELLM_LOCAL_MODEL_COST_MAP:-True}"
export PYTHONUNBUFFERED=1

# service name | python module | instance count | extra args   (start order)
SERVICES=(
  "model_server|threadline.testing.model_server|1|--port $MODEL_PORT"
  "ingress|threadline.services.ingress|${N_INGRESS:-1}|"
  "run_orchestrator|threadline.services.run_orchestrator|${N_ORCHESTRATORS:-1}|"
  "processor_worker|threadline.services.processor_worker|${N_WORKERS:-1}|"
  "notification_scheduler|threadline.services.notification_scheduler|${N_SCHEDULERS:-1}|"
  "gateway|threadline.services.gateway|${N_GATEWAYS:-1}|"
)
GATEWAY_PORT="${THREADLINE_GATEWAY_PORT:-18000}"
export THREADLINE_GATEWAY_HOST="${THREADLINE_GATEWAY_HOST:-127.0.0.1}"
if [[ -z "${THREADLINE_GATEWAY_API_KEYS:-}" && -z "${THREADLINE_GATEWAY_JWT_SECRET:-}" ]]; then
  export THREADLINE_GATEWAY_OPEN="${THREADLINE_GATEWAY_OPEN:-true}"
  # Mastra Studio (`make studio`, http://localhost:3000) calls the open gateway from its own origin
  export THREADLINE_GATEWAY_CORS_ORIGINS="${THREADLINE_GATEWAY_CORS_ORIGINS:-[\"http://localhost:3000\",\"http://127.0.0.1:3000\"]}"
fi

# Prints the modules (of those given) that `python -m` cannot run.
missing_modules() {
  "$PY" - "$@" <<'EOF'
import importlib.util, sys
for name in sys.argv[1:]:
    try:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations is not None:
            spec = importlib.util.find_spec(name + ".__main__")  # a package needs __main__
    except Exception:
        spec = None
    if spec is None:
        print(name)
EOF
}

# All pid files of a service, as "<service>-<n>" names, in numeric order.
instances_of() {
  local f
  for f in "$PID_DIR/$1"-*.pid; do
    [[ -e "$f" ]] || continue
    f="$(basename "$f" .pid)"; [[ "${f##*-}" =~ ^[0-9]+$ ]] && echo "$f"
  done | sort -t- -k2,2n
}

# stop_instances NAME...: SIGTERM all at once, one shared deadline, then SIGKILL.
stop_instances() {
  local name pid pids=() names=() i
  for name in "$@"; do
    pid="$(read_pid "$PID_DIR/$name.pid")"
    if pid_alive "$pid"; then
      log "stopping $name (pid $pid)"
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$pid"); names+=("$name")
    fi
  done
  local deadline=$((SECONDS + STOP_TIMEOUT))
  while ((SECONDS < deadline)); do
    local any=0
    for pid in "${pids[@]}"; do pid_alive "$pid" && any=1; done
    ((any)) || break
    sleep 0.2
  done
  for i in "${!pids[@]}"; do
    if pid_alive "${pids[$i]}"; then
      log "${names[$i]} (pid ${pids[$i]}) ignored SIGTERM for ${STOP_TIMEOUT}s: SIGKILL"
      kill -KILL "${pids[$i]}" 2>/dev/null || true
    fi
  done
  for name in "$@"; do rm -f "$PID_DIR/$name.pid"; done
}

start() {
  [[ -x "$PY" ]] || die "$PY not found: run \`make install\` first"
  mkdir -p "$PID_DIR" "$LOG_DIR"
  local modules=() entry svc mod count args missing
  for entry in "${SERVICES[@]}"; do IFS='|' read -r svc mod count args <<<"$entry"; modules+=("$mod"); done
  missing="$(missing_modules "${modules[@]}")"

  local started=() failed=() skipped=() n name pid k=-1 metrics_port=()
  for entry in "${SERVICES[@]}"; do
    IFS='|' read -r svc mod count args <<<"$entry"
    k=$((k + 1))   # the service's place: its instances' metrics ports are BASE + 100*k + n
    [[ "$count" =~ ^[0-9]+$ ]] || die "instance count for $svc must be a number, got '$count'"
    # scale down: stop instances numbered above the requested count
    local extra=()
    for name in $(instances_of "$svc"); do ((${name##*-} > count)) && extra+=("$name"); done
    ((${#extra[@]} == 0)) || stop_instances "${extra[@]}"
    ((count > 0)) || continue
    if grep -qxF "$mod" <<<"$missing"; then
      log "SKIP $svc: 'python -m $mod' has nothing to run (module or its __main__.py not written yet)"
      skipped+=("$svc"); continue
    fi
    for ((n = 1; n <= count; n++)); do
      name="$svc-$n"
      pid="$(read_pid "$PID_DIR/$name.pid")"
      if pid_alive "$pid"; then continue; fi
      # /metrics, /healthz, /readyz (docs/operations.md) on BASE + 100*k + n; none for the model server
      metrics_port=()
      if ((k > 0)); then metrics_port=("THREADLINE_METRICS_PORT=$((${THREADLINE_METRICS_BASE_PORT:-19400} + 100 * k + n))"); fi
      if [[ "$svc" == gateway ]]; then metrics_port+=("THREADLINE_GATEWAY_PORT=$((GATEWAY_PORT + n - 1))"); fi
      # shellcheck disable=SC2086  # $args is a plain word list
      THREADLINE_INSTANCE_ID="$name" spawn "$PID_DIR/$name.pid" "$LOG_DIR/$name.log" \
        env "${metrics_port[@]}" "$PY" -m "$mod" $args
      started+=("$name")
    done
  done

  # A process that dies within its first seconds is reported with its log.
  if ((${#started[@]})); then
    sleep "${SERVICES_SETTLE_SECONDS:-2}"
    for name in "${started[@]}"; do
      pid="$(read_pid "$PID_DIR/$name.pid")"
      if pid_alive "$pid"; then
        log "started $name (pid $pid)"
      else
        log "FAILED $name exited at start; last lines of .run/logs/$name.log:"
        tail -n 15 "$LOG_DIR/$name.log" | sed 's/^/    /' >&2
        rm -f "$PID_DIR/$name.pid"
        failed+=("$name")
      fi
    done
  fi
  if ((${#skipped[@]} || ${#failed[@]})); then
    die "not all services are running (missing modules: ${skipped[*]:-none}; failed: ${failed[*]:-none})"
  fi
  log "all services running"
}

stop() {
  local entry svc mod count args names=() i
  # reverse start order: the model server goes last
  for ((i = ${#SERVICES[@]} - 1; i >= 0; i--)); do
    IFS='|' read -r svc mod count args <<<"${SERVICES[$i]}"
    mapfile -t -O "${#names[@]}" names < <(instances_of "$svc")
  done
  ((${#names[@]} == 0)) || stop_instances "${names[@]}"
}

status() {  # one line per instance; exit 0 only when every expected instance is alive
  local entry svc mod count args name pid rc=0 names
  for entry in "${SERVICES[@]}"; do
    IFS='|' read -r svc mod count args <<<"$entry"
    names="$(instances_of "$svc")"
    if [[ -z "$names" ]]; then
      printf '%-28s %-8s %s\n' "$svc" - stopped; rc=1; continue
    fi
    for name in $names; do
      pid="$(read_pid "$PID_DIR/$name.pid")"
      if pid_alive "$pid"; then
        printf '%-28s %-8s %s\n' "$name" "$pid" alive
      else
        printf '%-28s %-8s %s\n' "$name" "${pid:--}" dead; rc=1
      fi
    done
  done
  return $rc
}

[[ "${1:-}" == status ]] || with_lock services
case "${1:-}" in
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  status) status ;;
  *) echo "usage: $0 start|stop|restart|status" >&2; exit 2 ;;
esac
