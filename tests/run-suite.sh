#!/usr/bin/env bash
# `make test` (decision 64): the tests marked `serial` (they stop or restart Kafka or PostgreSQL)
# in one process, and every other test in TEST_WORKERS pytest-xdist processes.
#
# TEST_SERIAL_APART=1 (the default) runs the two parts at once: the serial part on a second native
# cluster of this checkout (THREADLINE_RUN_DIR=.run/serial, every port + 300), so its restarts
# never reach the other part's cluster; its output is printed when both parts are done, and the
# second cluster is stopped then (unless it was already running). TEST_SERIAL_APART=0: the serial
# part first, on the one cluster, then the rest (as before decision 65). With a Docker engine
# (testcontainers) every part has its own containers and the parts run one after the other.
#
# Usage: tests/run-suite.sh PYTHON WORKERS [pytest args...]
#        tests/run-suite.sh --stop-serial-cluster      (make infra-down)
#        tests/run-suite.sh --destroy-serial-cluster   (make clean: stop it and delete its data)
# Exit: 0 when both parts pass (a part that collected nothing counts as passed when the other
# passed); else the first failing part's pytest exit code.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$ROOT" || exit 2

k=$(( ${THREADLINE_KAFKA_PORT:-19092} + 300 )); p=$(( ${THREADLINE_PG_PORT:-15432} + 300 ))
run_dir="$ROOT/.run/serial"
serial_env=(THREADLINE_RUN_DIR="$run_dir" THREADLINE_KAFKA_PORT="$k" THREADLINE_KAFKA_CONTROLLER_PORT=$((k + 1))
            THREADLINE_KAFKA_SASL_PORT=$((k + 2)) THREADLINE_PG_PORT="$p"
            THREADLINE_PGBOUNCER_PORT=$(( ${THREADLINE_PGBOUNCER_PORT:-16432} + 300 ))
            THREADLINE_KAFKA_BOOTSTRAP="127.0.0.1:$k"
            THREADLINE_PG_DSN="postgresql://threadline:threadline@127.0.0.1:$p/threadline")

stop_serial_cluster() {
  [[ -d "$run_dir" ]] || return 0
  env "${serial_env[@]}" bash deploy/native/pgbouncer.sh stop >/dev/null 2>&1 || true
  env "${serial_env[@]}" bash deploy/native/postgres.sh stop >/dev/null 2>&1 || true
  env "${serial_env[@]}" bash deploy/native/kafka.sh stop >/dev/null 2>&1 || true
}

if [[ "${1:-}" == "--stop-serial-cluster" ]]; then
  stop_serial_cluster
  exit 0
fi
if [[ "${1:-}" == "--destroy-serial-cluster" ]]; then  # make clean: its PostgreSQL data under /var/tmp too
  stop_serial_cluster
  env "${serial_env[@]}" bash deploy/native/postgres.sh destroy >/dev/null 2>&1 || true
  exit 0
fi
PY="$1"; WORKERS="$2"; shift 2

apart="${TEST_SERIAL_APART:-1}"
if [[ "${THREADLINE_DOCKER:-}" == "1" ]] || { [[ "${THREADLINE_DOCKER:-}" != "0" ]] && docker info >/dev/null 2>&1; }; then
  apart=0
fi

serial_args=(-q --durations=10 -m serial tests "$@")
other_args=(-q --durations=25 -n "$WORKERS" --dist loadfile -m "not serial" tests "$@")

if [[ "$apart" == "1" ]]; then
  mkdir -p "$run_dir"
  was_up=0
  (exec 3<>"/dev/tcp/127.0.0.1/$k") 2>/dev/null && was_up=1
  log="$run_dir/tests.log"
  echo "== tests marked serial, one process, on a second cluster (Kafka $k, PostgreSQL $p; output at the end)"
  echo "== the other tests, $WORKERS processes"
  env "${serial_env[@]}" "$PY" -m pytest "${serial_args[@]}" >"$log" 2>&1 &
  serial_pid=$!
  "$PY" -m pytest "${other_args[@]}"; rc2=$?
  wait "$serial_pid"; rc1=$?
  echo "== tests marked serial (output of the part that ran beside the others)"
  cat "$log"
  [[ "$was_up" == "1" ]] || stop_serial_cluster
else
  echo "== tests marked serial, one process"
  "$PY" -m pytest "${serial_args[@]}"; rc1=$?
  echo "== the other tests, $WORKERS processes"
  "$PY" -m pytest "${other_args[@]}"; rc2=$?
fi

if [[ $rc1 == 5 && $rc2 == 0 ]]; then rc1=0; fi
if [[ $rc2 == 5 && $rc1 == 0 ]]; then rc2=0; fi
if [[ $rc1 != 0 ]]; then echo "make test: the serial tests failed (pytest exit $rc1)" >&2; exit "$rc1"; fi
if [[ $rc2 != 0 ]]; then echo "make test: the parallel tests failed (pytest exit $rc2)" >&2; exit "$rc2"; fi
exit 0
