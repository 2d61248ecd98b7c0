# Threadline: the local cluster (Kafka + PostgreSQL + the four services, the HTTP gateway + the fake model server).
#
# With a Docker engine (`docker info` works) the cluster runs from compose.yaml; without
# one it runs natively from deploy/native/*.sh (Kafka jars from Maven Central, PostgreSQL
# from the OS packages). Force either with THREADLINE_DOCKER=1 or THREADLINE_DOCKER=0.
#
#   make up N_WORKERS=3      install, start infra, migrate, start the services
#   make ps | logs [SERVICE=processor_worker-1] | down | clean | test | demo
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-print-directory

ROOT   := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
export PY ?= $(ROOT)/.venv/bin/python
NATIVE := $(ROOT)/deploy/native
UV_VERSION := 0.13.8
LINES  ?= 40

# Instances per service (scaled by adding consumers to each service's group).
N_INGRESS       ?= 1
N_ORCHESTRATORS ?= 1
N_WORKERS       ?= 1
N_SCHEDULERS    ?= 1
N_GATEWAYS      ?= 1
export N_INGRESS N_ORCHESTRATORS N_WORKERS N_SCHEDULERS N_GATEWAYS

# Where the services find the cluster; values already in the environment win.
export THREADLINE_KAFKA_PORT      ?= 19092
export THREADLINE_PG_PORT         ?= 15432
export THREADLINE_MODEL_PORT      ?= 18080
# KAFKA_BROKERS=3: three Kafka nodes (natively; deploy/native/kafka.sh), each its own ports (+10 per
# node); the services get all of them as bootstrap and create every topic with 3 replicas
# (min.insync.replicas 2). Unset or 1: the single node.
KAFKA_BROKERS ?= 1
export KAFKA_BROKERS
ifneq ($(KAFKA_BROKERS),1)
export THREADLINE_KAFKA_BOOTSTRAP ?= $(shell KAFKA_BROKERS=$(KAFKA_BROKERS) THREADLINE_KAFKA_PORT=$(THREADLINE_KAFKA_PORT) bash $(NATIVE)/kafka.sh bootstrap)
export THREADLINE_REPLICATION_FACTOR ?= $(shell echo $$(( $(KAFKA_BROKERS) < 3 ? $(KAFKA_BROKERS) : 3 )))
endif
export THREADLINE_KAFKA_BOOTSTRAP ?= 127.0.0.1:$(THREADLINE_KAFKA_PORT)
export THREADLINE_PG_DSN          ?= postgresql://threadline:threadline@127.0.0.1:$(THREADLINE_PG_PORT)/threadline
export THREADLINE_MODEL_API_BASE  ?= http://127.0.0.1:$(THREADLINE_MODEL_PORT)/v1
export LITELLM_LOCAL_MODEL_COST_MAP ?= True

# Docker engine or native? (evaluated once per make run)
ifeq ($(origin THREADLINE_DOCKER),undefined)
THREADLINE_DOCKER := $(shell timeout 15 docker info >/dev/null 2>&1 && echo 1 || echo 0)
endif
COMPOSE := docker compose -f $(ROOT)/compose.yaml
# seconds `make up` (Docker) waits for every container to be healthy (compose healthchecks)
WAIT_TIMEOUT ?= 300
# compose.yaml has one broker: several are the native cluster's
ONE_BROKER := [[ "$(KAFKA_BROKERS)" == 1 ]] || { echo "KAFKA_BROKERS=$(KAFKA_BROKERS): several brokers run natively only (THREADLINE_DOCKER=0)" >&2; exit 2; }
SCALE   := --scale ingress=$(N_INGRESS) --scale run-orchestrator=$(N_ORCHESTRATORS) \
           --scale processor-worker=$(N_WORKERS) --scale notification-scheduler=$(N_SCHEDULERS) \
           --scale gateway=$(N_GATEWAYS)

# PG_STANDBY=1 (native): PostgreSQL with a synchronous streaming standby on THREADLINE_PG_PORT + 1
# (deploy/native/postgres.sh); the services name both servers and write to the one that accepts writes.
PG_STANDBY ?= 0
export THREADLINE_PG_STANDBY ?= $(PG_STANDBY)
ifeq ($(THREADLINE_PG_STANDBY),1)
ifeq ($(origin THREADLINE_PG_DSN),file)
PG_STANDBY_PORT := $(or $(THREADLINE_PG_STANDBY_PORT),$(shell echo $$(( $(THREADLINE_PG_PORT) + 1 ))))
THREADLINE_PG_DSN := postgresql://threadline:threadline@127.0.0.1:$(THREADLINE_PG_PORT),127.0.0.1:$(PG_STANDBY_PORT)/threadline?target_session_attrs=read-write
endif
endif

.PHONY: help install infra-up infra-down migrate migrate-contract up down ps logs demo studio test test-fast parity lint asyncapi validate-deploy chaos chaos-sweep bench clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-11s %s\n", $$1, $$2}'
	@echo "  mode: $$( [[ $(THREADLINE_DOCKER) == 1 ]] && echo docker || echo native)"

install: ## Python deps into .venv, byte-compiled (uv sync --frozen --compile-bytecode; pip-installs uv if missing); Debian's chromium for the Studio test
	@if command -v uv >/dev/null 2>&1; then uv=uv; \
	elif python3 -m uv --version >/dev/null 2>&1; then uv="python3 -m uv"; \
	else \
	  echo "installing uv==$(UV_VERSION) with pip"; \
	  python3 -m pip install -q "uv==$(UV_VERSION)" 2>/dev/null || \
	    python3 -m pip install -q --break-system-packages "uv==$(UV_VERSION)"; \
	  uv="python3 -m uv"; \
	fi; \
	cd $(ROOT) && $$uv sync --frozen --quiet --compile-bytecode
	@bash $(NATIVE)/chromium.sh install

infra-up: ## start Kafka and PostgreSQL (no-op when running); KAFKA_BROKERS=3: a three-node Kafka cluster
ifeq ($(THREADLINE_DOCKER),1)
	@$(ONE_BROKER)
	$(COMPOSE) up -d --wait kafka postgres
else
	@bash $(NATIVE)/kafka.sh start
	@bash $(NATIVE)/postgres.sh start
endif

infra-down: ## stop Kafka and PostgreSQL (data kept)
ifeq ($(THREADLINE_DOCKER),1)
	$(COMPOSE) stop kafka postgres
else
	@bash $(NATIVE)/pgbouncer.sh stop   # started by the C24 test (tests/e2e/test_pgbouncer.py)
	@bash $(NATIVE)/kafka.sh stop
	@bash $(NATIVE)/postgres.sh stop
	@bash $(ROOT)/tests/run-suite.sh --stop-serial-cluster   # the second cluster of `make test`, if any
endif

.PHONY: pg-failover pg-rejoin
pg-failover: ## PostgreSQL failover (PG_STANDBY=1, native): stop the primary, promote the standby; the services carry on
	@bash $(NATIVE)/postgres.sh promote

pg-rejoin: ## make the stopped former primary the synchronous standby of the new one (a fresh pg_basebackup)
	@bash $(NATIVE)/postgres.sh rejoin

migrate: ## apply the database migrations (the expand ones, as every service start does)
	cd $(ROOT) && $(PY) -m threadline.cli migrate

migrate-contract: ## also apply the contract migrations: once no process of the previous release runs (decision 113)
	cd $(ROOT) && $(PY) -m threadline.cli migrate --contract

up: ## install + infra-up + migrate + start the services (N_WORKERS=3, KAFKA_BROKERS=3 ...); Docker: waits until all are healthy
ifeq ($(THREADLINE_DOCKER),1)
	@$(ONE_BROKER)
	$(COMPOSE) up -d --build --wait --wait-timeout $(WAIT_TIMEOUT) $(SCALE)
else
	@$(MAKE) install
	@$(MAKE) infra-up
	@$(MAKE) migrate
	@bash $(NATIVE)/services.sh start
endif

down: ## stop the services, then the infra
ifeq ($(THREADLINE_DOCKER),1)
	$(COMPOSE) down
else
	@bash $(NATIVE)/services.sh stop
	@$(MAKE) infra-down
endif

ps: ## every process: name, pid, alive
ifeq ($(THREADLINE_DOCKER),1)
	$(COMPOSE) ps
else
	@printf '%-28s %-8s %s\n' NAME PID STATE
	@bash $(NATIVE)/kafka.sh status || true
	@bash $(NATIVE)/postgres.sh status || true
	@bash $(NATIVE)/services.sh status || true
endif

logs: ## last LINES=40 lines of every log, or of one: SERVICE=processor_worker-1
ifeq ($(THREADLINE_DOCKER),1)
	@svc="$(SERVICE)"; svc="$${svc%-[0-9]*}"; $(COMPOSE) logs --tail=$(LINES) $${svc//_/-}
else
	@cd $(ROOT)/.run/logs 2>/dev/null || { echo "no logs yet (.run/logs)"; exit 0; }; \
	if [[ -n "$(SERVICE)" ]]; then \
	  [[ -e "$(SERVICE).log" ]] || { echo "no log .run/logs/$(SERVICE).log; have: $$(ls | sed 's/\.log$$//' | tr '\n' ' ')"; exit 1; }; \
	  tail -n $(LINES) "$(SERVICE).log"; \
	else \
	  for f in *.log; do [[ -e "$$f" ]] || continue; echo "==> $${f%.log} <=="; tail -n $(LINES) "$$f"; echo; done; \
	fi
endif

demo: ## the example conversation against the running cluster (runs `up` first if needed)
ifeq ($(THREADLINE_DOCKER),1)
	@$(MAKE) install
	@$(MAKE) up
else
	@if ! bash $(NATIVE)/services.sh status >/dev/null 2>&1 || \
	    ! bash $(NATIVE)/kafka.sh status >/dev/null 2>&1 || ! bash $(NATIVE)/postgres.sh status >/dev/null 2>&1; then \
	  $(MAKE) up; fi
endif
	cd $(ROOT) && $(PY) -m threadline.examples.demo

STUDIO_PORT ?= 3000
STUDIO_LOCK := $(ROOT)/tests/studio/node_modules/.studio-lock
studio: ## Mastra Studio (the mastra CLI 1.31.0 pinned in tests/studio; Node 20+) against the running gateway: http://localhost:3000 (STUDIO_PORT)
	@cd $(ROOT)/tests/studio && if ! cmp -s package-lock.json $(STUDIO_LOCK); then \
	  npm ci --no-audit --no-fund --loglevel=error && cp package-lock.json $(STUDIO_LOCK); fi
	@curl -fsS -o /dev/null "http://127.0.0.1:$${THREADLINE_GATEWAY_PORT:-18000}/healthz" 2>/dev/null || \
	  echo "studio: no gateway answers on 127.0.0.1:$${THREADLINE_GATEWAY_PORT:-18000} (make up starts it)"
	cd $(ROOT)/tests/studio && MASTRA_TELEMETRY_DISABLED=1 node node_modules/mastra/dist/index.js studio \
	  --port $(STUDIO_PORT) --server-host 127.0.0.1 --server-port $${THREADLINE_GATEWAY_PORT:-18000} --server-api-prefix /api

TEST_WORKERS ?= 2
test: install ## the test suite (it starts the native cluster itself): the tests marked `serial` (they restart Kafka or PostgreSQL) in one process on a second cluster, beside the others in TEST_WORKERS processes (pytest-xdist; TEST_SERIAL_APART=0: one after the other, on one cluster)
	@bash $(ROOT)/tests/run-suite.sh $(PY) $(TEST_WORKERS) $(PYTEST_ARGS)

lint: install ## ruff (the rules in pyproject.toml) over the code and tests; mypy over shared/ and services/; the layering (import-linter); validate-deploy
	cd $(ROOT) && $(ROOT)/.venv/bin/ruff check .
	cd $(ROOT) && $(ROOT)/.venv/bin/mypy
	cd $(ROOT) && $(ROOT)/.venv/bin/lint-imports --no-cache
	@$(MAKE) validate-deploy

# Offline, a few seconds: deploy/validate.py (Kubernetes schemas of kubernetes-validate, KEDA's
# ScaledObject schema in deploy/schemas, kustomize build via kubectl when installed, the
# compose-spec schema of check-jsonschema, the project's rules), then `docker compose config`
# when a compose CLI answers (it needs no engine).
validate-deploy: install ## check deploy/k8s and compose.yaml against their schemas and the project's rules (docs/operations.md)
	cd $(ROOT) && $(PY) deploy/validate.py
	@if docker compose version >/dev/null 2>&1; then \
	  echo "docker compose config --quiet"; $(COMPOSE) config --quiet; \
	else echo "validate-deploy: no docker compose CLI here: compose.yaml checked against the compose-spec schema only"; fi

asyncapi: install ## write docs/asyncapi.json, the wire contract declared in shared/threadline/contract.py
	cd $(ROOT) && $(ROOT)/.venv/bin/faststream docs gen threadline.contract:app --out docs/asyncapi.json

test-fast: install ## the unit tests only (pure logic, no cluster; under a minute)
	cd $(ROOT) && THREADLINE_NO_CLUSTER=1 $(PY) -m pytest -q -m unit tests $(PYTEST_ARGS)

PARITY_LOCK := $(ROOT)/tests/parity/node_modules/.parity-lock
parity: install ## the differential suite against @mastra/core 1.71.0 (npm ci in tests/parity when its lockfile changed; Node 20+; ~3 min): writes docs/parity.md
	@cd $(ROOT)/tests/parity && if ! cmp -s package-lock.json $(PARITY_LOCK); then \
	  npm ci --no-audit --no-fund --loglevel=error && cp package-lock.json $(PARITY_LOCK); fi
	cd $(ROOT) && THREADLINE_PARITY_REPORT=$(ROOT)/docs/parity.md $(PY) -m pytest -q -p no:randomly -m parity tests/parity $(PYTEST_ARGS)

CHAOS_RUNS   ?= 150
CHAOS_ROUNDS ?= 3
chaos: install ## longer chaos test (CHAOS_RUNS=150 runs, CHAOS_ROUNDS=3 kill rounds, broker + PostgreSQL restarts; THREADLINE_CHAOS_SEED); figures in .run/chaos.json
	@mkdir -p $(ROOT)/.run
	cd $(ROOT) && THREADLINE_CHAOS_RUNS=$(CHAOS_RUNS) THREADLINE_CHAOS_ROUNDS=$(CHAOS_ROUNDS) \
	  THREADLINE_CHAOS_SEED=$${THREADLINE_CHAOS_SEED:-20261130} \
	  THREADLINE_CHAOS_PG_RESTART=1 THREADLINE_CHAOS_REPORT=$(ROOT)/.run/chaos.json \
	  THREADLINE_CHAOS_COMMAND="make chaos CHAOS_RUNS=$(CHAOS_RUNS) CHAOS_ROUNDS=$(CHAOS_ROUNDS)" \
	  $(PY) -m pytest -q -s -p no:logging tests/e2e/test_chaos.py $(PYTEST_ARGS)

SEEDS       ?= 20
SEED_FROM   ?= 1
SWEEP_RUNS  ?= 60
SWEEP_ROUNDS ?= 2
chaos-sweep: install ## the chaos test over SEEDS consecutive seeds from SEED_FROM (SWEEP_RUNS=60 runs, SWEEP_ROUNDS=2, PostgreSQL restart); per-seed table, non-zero if any seed fails
	@rm -rf $(ROOT)/.run/chaos-sweep && mkdir -p $(ROOT)/.run/chaos-sweep
	@cd $(ROOT) && last=$$(( $(SEED_FROM) + $(SEEDS) - 1 )); rc=0; \
	  THREADLINE_CHAOS_RUNS=$(SWEEP_RUNS) THREADLINE_CHAOS_ROUNDS=$(SWEEP_ROUNDS) THREADLINE_CHAOS_PG_RESTART=1 \
	  THREADLINE_CHAOS_SEEDS=$(SEED_FROM)-$$last THREADLINE_CHAOS_REPORT_DIR=$(ROOT)/.run/chaos-sweep \
	  THREADLINE_CHAOS_COMMAND="make chaos-sweep" \
	  $(PY) -m pytest -q -s -p no:logging tests/e2e/test_chaos.py $(PYTEST_ARGS) || rc=$$?; \
	  echo; $(PY) -m tests.e2e.chaos_table $(ROOT)/.run/chaos-sweep --seeds $(SEED_FROM)-$$last || rc=1; exit $$rc

bench: install ## benchmarks beside same-run baselines (~9 min; BENCH_ARGS="--only ttfc --runs 100"; docs/benchmarks.md)
	cd $(ROOT) && $(PY) -m bench $(BENCH_ARGS)

clean: ## down, delete all data (Kafka, PostgreSQL) and .run/
ifeq ($(THREADLINE_DOCKER),1)
	$(COMPOSE) down -v
else
	@$(MAKE) down
	@bash $(NATIVE)/postgres.sh destroy
	@bash $(ROOT)/tests/run-suite.sh --destroy-serial-cluster
endif
	rm -rf $(ROOT)/.run
