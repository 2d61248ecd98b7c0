#!/usr/bin/env bash
# Apache Kafka in KRaft mode, run natively with `java`: one node (broker + controller), or with
# KAFKA_BROKERS=N a cluster of N such combined nodes (a controller quorum of N).
#
#   deploy/native/kafka.sh install|start|stop|status|restart|config [NODE] | bootstrap
#
# install  resolves the broker jars and their runtime dependencies from Maven
#          Central (deploy/native/kafka/pom.xml) into a cache shared by every
#          clone: ${XDG_CACHE_HOME:-~/.cache}/threadline/kafka-<version>/libs
# start    install, format the KRaft storage once, start the broker in the
#          background and wait until it answers a metadata request
# stop     SIGTERM, then SIGKILL after $KAFKA_STOP_TIMEOUT seconds (every node that runs)
# config   write the nodes' server.properties (as start does) and print their paths
# bootstrap  print every node's host:port, comma-separated
# Every command is idempotent. NODE (1..N) limits start, stop and restart to one node of a cluster
# (a rolling restart is `restart 1`, `restart 2`, ...); `start` alone starts every node not running.
#
# KAFKA_BROKERS=N (N > 1): node i is node.id i and listens on THREADLINE_KAFKA_PORT + 10 (i - 1)
# (its controller and SASL ports likewise), with its own config and data in .run/kafka/node-i/,
# pid file .run/kafka-i.pid and log .run/logs/kafka-i.log; the voters are all N nodes. Topics get
# replication factor min(N, 3) by default, min.insync.replicas 2 from 3 replicas (else 1), and
# unclean leader election stays off; the internal topics (consumer offsets, transactions, share
# state) likewise. Heap per node: -Xmx512m unless KAFKA_HEAP_OPTS says otherwise.
# KAFKA_BROKERS unset or 1: the single node of .run/kafka/ (the paths without the node number).
#
# A second listener, SASL_SSL on THREADLINE_KAFKA_SASL_PORT (the plaintext port + 2), takes
# SASL PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 as user `threadline` / password `threadline-secret`
# over TLS, with a certificate authority and a broker certificate for 127.0.0.1 made with
# openssl at the first start (.run/kafka/tls/ca.pem is the CA a client trusts).
#
# Env: KAFKA_BROKERS (1), THREADLINE_KAFKA_VERSION (4.4.0), THREADLINE_KAFKA_PORT (19092),
#      THREADLINE_KAFKA_CONTROLLER_PORT (port + 1), THREADLINE_KAFKA_SASL_PORT (port + 2),
#      THREADLINE_KAFKA_HOST (127.0.0.1: the address every listener binds and advertises; the
#      partition tests give an address a network namespace reaches, threadline.testing.netns),
#      THREADLINE_KAFKA_QUORUM_LINGER_MS (1: controller.quorum.append.linger.ms),
#      KAFKA_HEAP_OPTS (-Xmx768m -Xms256m; a cluster's nodes: -Xmx512m -Xms128m),
#      KAFKA_START_TIMEOUT (90), KAFKA_STOP_TIMEOUT (30)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

KAFKA_VERSION="${THREADLINE_KAFKA_VERSION:-4.4.0}"
KAFKA_MAIN=kafka.Kafka                 # the KRaft server (core module, Scala)
KAFKA_STORAGE_TOOL=kafka.tools.StorageTool
HOST="${THREADLINE_KAFKA_HOST:-127.0.0.1}"
BROKERS="${KAFKA_BROKERS:-1}"
[[ "$BROKERS" =~ ^[1-9][0-9]?$ ]] || { echo "[kafka] ERROR: KAFKA_BROKERS must be 1..99, got '$BROKERS'" >&2; exit 2; }
BASE_PORT="${THREADLINE_KAFKA_PORT:-19092}"
BASE_CONTROLLER_PORT="${THREADLINE_KAFKA_CONTROLLER_PORT:-$((BASE_PORT + 1))}"  # one variable moves all three
BASE_SASL_PORT="${THREADLINE_KAFKA_SASL_PORT:-$((BASE_PORT + 2))}"
NODE_PORT_STEP=10                       # node i's ports: the base ports + 10 (i - 1)
REPLICAS=$((BROKERS < 3 ? BROKERS : 3)) # default and internal topics' replication factor
MIN_ISR=$((REPLICAS >= 3 ? 2 : 1))      # an acknowledged write is on 2 replicas at least
SASL_USER=threadline
SASL_PASSWORD=threadline-secret
if ((BROKERS == 1)); then DEFAULT_HEAP="-Xmx768m -Xms256m"; else DEFAULT_HEAP="-Xmx512m -Xms128m"; fi
read -ra HEAP <<<"${KAFKA_HEAP_OPTS:-$DEFAULT_HEAP}"   # JVM heap flags (array)
START_TIMEOUT="${KAFKA_START_TIMEOUT:-90}"
STOP_TIMEOUT="${KAFKA_STOP_TIMEOUT:-30}"

CACHE_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/threadline/kafka-$KAFKA_VERSION"
LIBS="$CACHE_DIR/libs"
POM="$REPO_ROOT/deploy/native/kafka/pom.xml"
KAFKA_DIR="$RUN_DIR/kafka"
LOG4J="$KAFKA_DIR/log4j2.xml"
TLS_DIR="$KAFKA_DIR/tls"
CLUSTER_ID_FILE="$KAFKA_DIR/cluster.id"   # a cluster's nodes are formatted with one id

# use_node I: the node the functions below act on (its ports, paths and name). One node keeps the
# paths without a number (.run/kafka/data, .run/kafka.pid, .run/logs/kafka.log).
use_node() {
  NODE="$1"
  local shift_by=$((NODE_PORT_STEP * (NODE - 1)))
  PORT=$((BASE_PORT + shift_by))
  CONTROLLER_PORT=$((BASE_CONTROLLER_PORT + shift_by))
  SASL_PORT=$((BASE_SASL_PORT + shift_by))
  if ((BROKERS == 1)); then
    NAME=kafka NODE_DIR="$KAFKA_DIR"
  else
    NAME="kafka-$NODE" NODE_DIR="$KAFKA_DIR/node-$NODE"
  fi
  DATA_DIR="$NODE_DIR/data"
  CONFIG="$NODE_DIR/server.properties"
  PIDFILE="$RUN_DIR/$NAME.pid"
  LOGFILE="$LOG_DIR/$NAME.log"
}

# voters: node.id@host:controller-port of every node (the static controller quorum)
voters() {
  local i out=""
  for ((i = 1; i <= BROKERS; i++)); do
    out+="${out:+,}$i@$HOST:$((BASE_CONTROLLER_PORT + NODE_PORT_STEP * (i - 1)))"
  done
  printf '%s' "$out"
}

# bootstrap: host:port of every node, comma-separated (what the services are given)
bootstrap() {
  local i out=""
  for ((i = 1; i <= BROKERS; i++)); do out+="${out:+,}$HOST:$((BASE_PORT + NODE_PORT_STEP * (i - 1)))"; done
  printf '%s' "$out"
}
use_node 1

# --- install ---------------------------------------------------------------

ensure_java_maven() {
  command -v java >/dev/null && command -v mvn >/dev/null && return 0
  # A fresh Debian machine as root: install them from the OS packages.
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    log "java/mvn missing: installing openjdk-17-jdk-headless and maven with apt-get"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jdk-headless maven >/dev/null
  fi
  command -v java >/dev/null || die "java (17+) not found"
  command -v mvn >/dev/null || die "mvn (Maven) not found"
}

install() {
  if [[ -f "$CACHE_DIR/.complete" ]]; then return 0; fi
  ensure_java_maven
  log "resolving org.apache.kafka:kafka_2.13:$KAFKA_VERSION and its runtime deps into $LIBS"
  local tmp="$CACHE_DIR/libs.tmp.$$"
  mkdir -p "$CACHE_DIR"
  rm -rf "$tmp"
  # Maven's own output is kept in a log and shown only when it fails.
  mkdir -p "$LOG_DIR"
  if ! mvn -B -f "$POM" -Dstyle.color=never -Dkafka.version="$KAFKA_VERSION" \
      dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$tmp" \
      >"$LOG_DIR/kafka-install.log" 2>&1; then
    grep -E 'ERROR|BUILD' "$LOG_DIR/kafka-install.log" | tail -n 20 >&2
    rm -rf "$tmp"
    die "Maven could not resolve Kafka $KAFKA_VERSION (is Maven Central reachable? full log: .run/logs/kafka-install.log)"
  fi
  [[ -f "$tmp/kafka_2.13-$KAFKA_VERSION.jar" ]] || die "kafka_2.13-$KAFKA_VERSION.jar missing after resolve"
  rm -rf "$LIBS" && mv "$tmp" "$LIBS"   # publish atomically for other clones
  touch "$CACHE_DIR/.complete"
  log "installed $(find "$LIBS" -name "*.jar" | wc -l) jars ($(du -sh "$LIBS" | cut -f1))"
}

# --- config ----------------------------------------------------------------

write_config() {
  mkdir -p "$NODE_DIR" "$LOG_DIR"
  cat >"$CONFIG" <<EOF
# Generated by deploy/native/kafka.sh; edits are overwritten on start.
process.roles=broker,controller
node.id=$NODE
controller.quorum.voters=$(voters)
listeners=PLAINTEXT://$HOST:$PORT,CONTROLLER://$HOST:$CONTROLLER_PORT,SASL_SSL://$HOST:$SASL_PORT
advertised.listeners=PLAINTEXT://$HOST:$PORT,SASL_SSL://$HOST:$SASL_PORT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_$SASL_USER="$SASL_PASSWORD";
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.ssl.keystore.type=PEM
listener.name.sasl_ssl.ssl.keystore.location=$TLS_DIR/broker-keystore.pem
listener.name.sasl_ssl.ssl.truststore.type=PEM
listener.name.sasl_ssl.ssl.truststore.location=$TLS_DIR/ca.pem
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
log.dirs=$DATA_DIR
num.partitions=1
default.replication.factor=$REPLICAS
min.insync.replicas=$MIN_ISR
offsets.topic.replication.factor=$REPLICAS
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=$REPLICAS
transaction.state.log.min.isr=$MIN_ISR
share.coordinator.state.topic.replication.factor=$REPLICAS
share.coordinator.state.topic.min.isr=$MIN_ISR
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
delete.topic.enable=true
log.retention.hours=24
log.segment.bytes=67108864
# an offset/time index entry per MiB appended, not per 4 KiB: the first entry of a fresh segment
# held its produce for up to 170 ms (docs/decisions.md, decision 89)
log.index.interval.bytes=1048576
# the controller commits a metadata change (a thread's new chunk topic) within 1 ms, not 25: one
# topic's creation ~10 ms instead of ~35 (docs/decisions.md, decision 100)
controller.quorum.append.linger.ms=${THREADLINE_KAFKA_QUORUM_LINGER_MS:-1}
EOF
  if ((BROKERS > 1)); then cat >>"$CONFIG" <<EOF
# a cluster of $BROKERS nodes: a replica that fell out of the in-sync set never becomes leader (an
# acknowledged write, on min.insync.replicas replicas, is never lost to a leader change); Kafka's
# default, stated
unclean.leader.election.enable=false
EOF
  fi
  cat >"$LOG4J" <<'EOF'
<?xml version="1.0" encoding="UTF-8"?>
<!-- Generated by deploy/native/kafka.sh: everything to stdout (.run/logs/kafka.log). -->
<Configuration status="WARN">
  <Appenders>
    <Console name="stdout" target="SYSTEM_OUT">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </Console>
  </Appenders>
  <Loggers>
    <Root level="INFO"><AppenderRef ref="stdout"/></Root>
    <Logger name="state.change.logger" level="WARN"/>
    <Logger name="kafka.request.logger" level="WARN"/>
    <Logger name="org.apache.kafka.clients" level="WARN"/>
    <Logger name="org.apache.kafka.common.utils.AppInfoParser" level="WARN"/>
    <!-- config dumps (printed ~10 times at start) and per-partition chatter -->
    <Logger name="org.apache.kafka.common.config.AbstractConfig" level="WARN"/>
    <Logger name="kafka.server.KafkaConfig" level="WARN"/>
    <Logger name="kafka.cluster.Partition" level="WARN"/>
    <Logger name="org.apache.kafka.storage.internals.log" level="WARN"/>
  </Loggers>
</Configuration>
EOF
}

# make_tls: a CA and a broker certificate for 127.0.0.1 (PEM), once per data dir.
make_tls() {
  [[ -s "$TLS_DIR/broker-keystore.pem" ]] && return 0
  mkdir -p "$TLS_DIR"
  log "making a CA and a broker certificate for the SASL_SSL listener in ${TLS_DIR#"$REPO_ROOT"/}"
  (
    cd "$TLS_DIR"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=threadline-dev-ca" \
      -keyout ca-key.pem -out ca.pem 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=$HOST" -keyout broker-key.pem -out broker.csr 2>/dev/null
    printf 'subjectAltName=IP:%s,DNS:localhost\n' "$HOST" >broker.ext
    openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 3650 \
      -extfile broker.ext -out broker.pem 2>/dev/null
    openssl pkcs8 -topk8 -nocrypt -in broker-key.pem -out broker-key8.pem
    cat broker-key8.pem broker.pem >broker-keystore.pem
  ) || die "could not make the TLS files (openssl)"
}

# add_scram_users: SCRAM credentials of the SASL user, once per data dir (kept in the metadata log;
# the marker lives in the data dir, so a wiped data dir gets its users again).
add_scram_users() {
  [[ -f "$DATA_DIR/scram-users.done" ]] && return 0
  java -Xmx128m -cp "$LIBS/*" -Dlog4j2.configurationFile="$LOG4J" "$(dirname "$POM")/AddScramUsers.java" \
    "$(bootstrap)" "$SASL_USER" "$SASL_PASSWORD" >>"$LOGFILE" 2>&1 \
    || { tail -n 20 "$LOGFILE" >&2; die "could not add the SCRAM users"; }
  touch "$DATA_DIR/scram-users.done"
}

format_storage() {
  [[ -f "$DATA_DIR/meta.properties" ]] && return 0
  local cluster_id
  if ((BROKERS > 1)) && [[ -s "$CLUSTER_ID_FILE" ]]; then
    cluster_id="$(<"$CLUSTER_ID_FILE")"   # the id the other nodes were formatted with
  else
    cluster_id="$(java -Xmx128m -cp "$LIBS/*" -Dlog4j2.configurationFile="$LOG4J" \
                  "$KAFKA_STORAGE_TOOL" random-uuid 2>/dev/null | tail -n1)"
    [[ -n "$cluster_id" ]] || die "could not generate a cluster id"
    ((BROKERS == 1)) || printf '%s\n' "$cluster_id" >"$CLUSTER_ID_FILE"
  fi
  log "formatting KRaft storage in $DATA_DIR (cluster id $cluster_id)"
  mkdir -p "$DATA_DIR"
  java -Xmx256m -cp "$LIBS/*" -Dlog4j2.configurationFile="$LOG4J" \
    "$KAFKA_STORAGE_TOOL" format --ignore-formatted -t "$cluster_id" -c "$CONFIG" \
    >>"$LOGFILE" 2>&1 || { tail -n 20 "$LOGFILE" >&2; die "storage format failed"; }
}

# --- readiness ---------------------------------------------------------------

# started_since MARK: 0 once *our* broker logged that it started (log lines after
# MARK), so a broker of another clone answering on the same port is not mistaken for ours.
started_since() {
  awk -v m="$1" 'NR > m && /Kafka Server started/ { ok = 1 } END { exit !ok }' "$LOGFILE" 2>/dev/null
}

# 0 when the broker answers a metadata request (aiokafka from the project's venv;
# skipped while the venv is not there yet).
broker_answers() {
  [[ -x "$PY" ]] && "$PY" -c 'import aiokafka' 2>/dev/null || return 0
  "$PY" - "$HOST:$PORT" <<'EOF' >/dev/null 2>&1
import asyncio, sys
from aiokafka.admin import AIOKafkaAdminClient

async def main():
    admin = AIOKafkaAdminClient(bootstrap_servers=sys.argv[1], request_timeout_ms=3000)
    await asyncio.wait_for(admin.start(), 5)
    try:
        await asyncio.wait_for(admin.list_topics(), 5)
    finally:
        await admin.close()

asyncio.run(main())
EOF
}

# --- commands ----------------------------------------------------------------

running_pid() {  # prints the current node's pid when it is alive
  local pid; pid="$(read_pid "$PIDFILE")"
  pid_alive "$pid" && echo "$pid"
}

declare -A MARK=()   # node -> lines its log had before this start (started_since)

spawn_node() {  # start the current node in the background (install and TLS done)
  if port_open "$HOST" "$PORT" || port_open "$HOST" "$CONTROLLER_PORT" || port_open "$HOST" "$SASL_PORT"; then
    die "port $PORT, $CONTROLLER_PORT or $SASL_PORT is already taken by another process (another clone's Kafka? stop it first, or move this clone's cluster: README, \"A second clone\")"
  fi
  write_config
  format_storage
  MARK[$NODE]=$(wc -l 2>/dev/null <"$LOGFILE" || echo 0)
  if ((BROKERS == 1)); then
    log "starting Kafka $KAFKA_VERSION on $HOST:$PORT (log: ${LOGFILE#"$REPO_ROOT"/})"
  else
    log "starting Kafka $KAFKA_VERSION node $NODE of $BROKERS on $HOST:$PORT (log: ${LOGFILE#"$REPO_ROOT"/})"
  fi
  spawn "$PIDFILE" "$LOGFILE" java "${HEAP[@]}" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    -Djava.awt.headless=true -Dlog4j2.configurationFile="$LOG4J" \
    -cp "$LIBS/*" "$KAFKA_MAIN" "$CONFIG"
}

wait_node() {  # DEADLINE: 0 once the current node answers; else its log's tail and exit 1
  local pid mark="${MARK[$NODE]}"; pid="$(read_pid "$PIDFILE")"
  until pid_alive "$pid" && started_since "$mark" && port_open "$HOST" "$PORT" && broker_answers; do
    if ! pid_alive "$pid"; then
      tail -n +"$((mark + 1))" "$LOGFILE" | tail -n 30 >&2
      rm -f "$PIDFILE"
      die "Kafka${NODE_LABEL:-} exited during start-up (see above)"
    fi
    if ((SECONDS >= DEADLINE)); then
      tail -n 30 "$LOGFILE" >&2
      stop "${STARTING[@]}"
      die "Kafka${NODE_LABEL:-} did not answer on $HOST:$PORT within ${START_TIMEOUT}s"
    fi
    sleep 0.5
  done
}

start() {  # NODES...: start those not running, all at once (a quorum needs a majority up), then wait
  local i
  STARTING=()
  for i in "$@"; do
    use_node "$i"
    if [[ -n "$(running_pid)" ]]; then
      log "already running (pid $(running_pid)) on $HOST:$PORT"
    else
      STARTING+=("$i")
    fi
  done
  ((${#STARTING[@]})) || return 0
  install
  make_tls
  for i in "${STARTING[@]}"; do use_node "$i"; spawn_node; done
  DEADLINE=$((SECONDS + START_TIMEOUT))
  for i in "${STARTING[@]}"; do
    use_node "$i"
    ((BROKERS == 1)) || NODE_LABEL=" node $NODE"
    wait_node
  done
  use_node 1
  add_scram_users
  for i in "${STARTING[@]}"; do use_node "$i"; log "ready (pid $(read_pid "$PIDFILE"))${NODE_LABEL:+ on $HOST:$PORT}"; done
}

stop() {  # NODES...: SIGTERM to each at once, SIGKILL after $STOP_TIMEOUT; none given: every node that runs
  local i pid files=()
  if (($#)); then
    for i in "$@"; do use_node "$i"; files+=("$PIDFILE"); done
  else
    files=("$RUN_DIR"/kafka.pid "$RUN_DIR"/kafka-[0-9]*.pid)   # either shape, whatever KAFKA_BROKERS says
  fi
  for i in "${files[@]}"; do
    [[ -e "$i" ]] || continue
    pid="$(read_pid "$i")"
    if pid_alive "$pid"; then stop_pid "$pid" "$(basename "$i" .pid)" "$STOP_TIMEOUT" & fi
  done
  wait
  rm -f "${files[@]}"
}

status() {  # one line per node: name pid state; exit 0 only when every node runs
  local i pid rc=0
  for ((i = 1; i <= BROKERS; i++)); do
    use_node "$i"
    pid="$(read_pid "$PIDFILE")"
    if pid_alive "$pid"; then
      printf '%-28s %-8s %s\n' "$NAME" "$pid" "alive  $HOST:$PORT"
    elif [[ -n "$pid" ]]; then
      printf '%-28s %-8s %s\n' "$NAME" "$pid" dead; rc=1
    else
      printf '%-28s %-8s %s\n' "$NAME" - stopped; rc=1
    fi
  done
  return "$rc"
}

# the nodes a command acts on: NODE given, else all
nodes=()
if [[ -n "${2:-}" ]]; then
  [[ "$2" =~ ^[0-9]+$ ]] && (($2 >= 1 && $2 <= BROKERS)) || die "no node $2 (KAFKA_BROKERS=$BROKERS)"
  nodes=("$2")
else
  for ((n = 1; n <= BROKERS; n++)); do nodes+=("$n"); done
fi

[[ "${1:-}" == status || "${1:-}" == bootstrap ]] || with_lock kafka
case "${1:-}" in
  install) install ;;
  start) start "${nodes[@]}" ;;
  stop) if [[ -n "${2:-}" ]]; then stop "${nodes[@]}"; else stop; fi ;;
  restart) if [[ -n "${2:-}" ]]; then stop "${nodes[@]}"; else stop; fi; start "${nodes[@]}" ;;
  status) status ;;
  bootstrap) bootstrap; echo ;;
  config) for n in "${nodes[@]}"; do use_node "$n"; write_config; echo "$CONFIG"; done ;;
  *) echo "usage: $0 install|start|stop|restart|status|config [NODE] | bootstrap" >&2; exit 2 ;;
esac
