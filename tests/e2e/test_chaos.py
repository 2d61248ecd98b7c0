"""Chaos: concurrent runs with a tool and streamed text while processes are killed (-9) at random
moments and the broker (and, in ``make chaos``, PostgreSQL) restarts; then the checker.

``make test`` runs 50 runs on 2 processor-workers + 2 run-orchestrators, kills one of each and
restarts the broker once. ``make chaos`` sets the environment for a longer version:

    THREADLINE_CHAOS_RUNS (50)  THREADLINE_CHAOS_ROUNDS (1: kills of one worker + one orchestrator)
    THREADLINE_CHAOS_PG_RESTART (0)  THREADLINE_CHAOS_SEED (20261130)  THREADLINE_CHAOS_REPORT (path
    of the JSON figures)

With more than one round every killed instance is replaced, so two of each keep running.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import time
import uuid
from pathlib import Path

import pytest

from tests.e2e.checker import check_runs
from tests.e2e.faults import Observer, read_all, restart_broker, restart_postgres, restart_unavailable
from tests.e2e.helpers import execute, rows
from threadline.client import ThreadlineClient
from threadline.kafka.admin import TopicAdmin
from threadline.testing import model_script as ms
from threadline.topics import Topics

RUNS = int(os.environ.get("THREADLINE_CHAOS_RUNS", "50"))
ROUNDS = int(os.environ.get("THREADLINE_CHAOS_ROUNDS", "1"))
PG_RESTART = os.environ.get("THREADLINE_CHAOS_PG_RESTART", "0") == "1"
SEED = int(os.environ.get("THREADLINE_CHAOS_SEED", "20261130"))
REPORT = os.environ.get("THREADLINE_CHAOS_REPORT")
ANSWER = ("Done: the effect is recorded once, every chunk arrives once and in order, "
          "and the run ends with a single finish whatever was killed on the way.")


def _supervised_start(services, name: str, instance: str, tries: int = 10) -> None:
    """Start an instance the way a supervisor would: again, until it comes up (it exits when the
    broker or PostgreSQL is away at start-up)."""
    for i in range(tries):
        try:
            services.start(name, instance)
            return
        except RuntimeError:
            if instance in services.procs:  # it may still be starting: never leave it behind
                services.kill(instance)
            if i == tries - 1:
                raise
            time.sleep(2)


def _plan(rng: random.Random) -> list[tuple[float, str]]:
    events = []
    for r in range(ROUNDS):
        events.append((rng.uniform(1.0, 5.0) + 8 * r, "kill_worker"))
        events.append((rng.uniform(1.0, 5.0) + 8 * r, "kill_orchestrator"))
    events.append((rng.uniform(3.0, 7.0), "restart_broker"))
    if PG_RESTART:
        events.append((rng.uniform(3.0, 7.0) + 8 * max(0, ROUNDS - 1) / 2 + 4, "restart_postgres"))
    return sorted(events)


async def test_chaos_runs_survive_kills_and_restarts(services, settings, model, cluster):
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # the broker restart is expected
    why = restart_unavailable()
    if why:
        pytest.skip(f"the chaos test restarts the broker, which this cluster does not allow: {why}")
    rng = random.Random(SEED)
    plan = _plan(rng)
    print(f"\nchaos seed {SEED}: {RUNS} runs, plan {[(round(t, 1), a) for t, a in plan]}")
    await execute(cluster.dsn, "CREATE TABLE IF NOT EXISTS chaos_effects (run_id text, tool_call_id text, "
                               "idempotency_key text, pid integer, at timestamptz DEFAULT now())")
    tag = uuid.uuid4().hex[:6]
    threads = [f"th-chaos-{tag}-{i}" for i in range(RUNS)]
    for i, th in enumerate(threads):  # step 0 calls the tool (a new id each time it is asked), step 1 streams text
        await model.aqueue([ms.tool_calls(ms.tool_call("chaos_effect", {"n": i}), times=10)],
                           model=f"threadline-chaos-{th}-s0")
        await model.aqueue([ms.text(ANSWER, chunk_delay=0.03, times=10)], model=f"threadline-chaos-{th}-s1")
    topics = Topics(settings.topic_prefix)
    chunk_topics = [topics.chunks("res-chaos", th) for th in threads]
    admin = TopicAdmin(settings.kafka_bootstrap)
    await admin.start()
    for t in chunk_topics:
        await admin.ensure_one(t, config={"retention.ms": str(settings.chunk_retention_ms)})
    await admin.stop()
    live = Observer(settings.kafka_bootstrap, chunk_topics)
    await live.start()

    workers, orchestrators = ["processor_worker-1"], ["run_orchestrator-1"]
    services.start("processor_worker", "processor_worker-2")
    services.start("run_orchestrator", "run_orchestrator-2")
    workers.append("processor_worker-2")
    orchestrators.append("run_orchestrator-2")
    figures = {"seed": SEED, "kills": 0, "broker_restarts": 0, "postgres_restarts": 0}
    n_new = 2
    killed_pids: set[int] = set()

    async def act(action: str) -> None:
        nonlocal n_new
        if action in ("kill_worker", "kill_orchestrator"):
            pool, name = (workers, "processor_worker") if action == "kill_worker" else (orchestrators, "run_orchestrator")
            for _ in range(240):  # a replacement still starting (e.g. while the broker is away)
                if len(pool) >= 2 or ROUNDS == 1:
                    break
                await asyncio.sleep(0.5)
            victim = rng.choice(sorted(pool))
            pool.remove(victim)
            killed_pids.add(services.procs[victim].pid)
            services.kill(victim)
            figures["kills"] += 1
            print(f"  {time.monotonic() - t0:5.1f}s kill -9 {victim}")
            if ROUNDS > 1:
                n_new += 1
                fresh = f"{name}-{n_new}"
                await asyncio.to_thread(_supervised_start, services, name, fresh)
                pool.append(fresh)
        elif action == "restart_broker":
            away = await asyncio.to_thread(restart_broker)
            figures["broker_restarts"] += 1
            print(f"  {time.monotonic() - t0:5.1f}s broker restarted ({away:.1f}s away)")
        elif action == "restart_postgres":
            away = await asyncio.to_thread(restart_postgres)
            figures["postgres_restarts"] += 1
            print(f"  {time.monotonic() - t0:5.1f}s PostgreSQL restarted ({away:.1f}s away)")

    async def at(when: float, action: str) -> None:
        await asyncio.sleep(max(0.0, when - (time.monotonic() - t0)))
        await act(action)

    async def chaos() -> None:  # each fault at its own time (a kill may land while the broker is away)
        await asyncio.gather(*(at(when, action) for when, action in plan))

    try:
        async with ThreadlineClient(settings) as tl:
            sent = await asyncio.gather(*(tl.stream(f"do effect {i}", agent_id="chaos", resource_id="res-chaos",
                                                    thread_id=th) for i, th in enumerate(threads)))
            run_ids = [(await s.accepted).run_id for s in sent]
        t0 = time.monotonic()
        await chaos()
        deadline = time.monotonic() + 60 + 3 * RUNS
        while True:
            done = await rows(cluster.dsn, "SELECT count(*) AS n FROM runs WHERE run_id = ANY($1::text[]) "
                                           "AND status <> 'running'", run_ids)
            idle = await rows(cluster.dsn, "SELECT count(*) AS n FROM thread_leases WHERE thread_id = ANY($1::text[]) "
                                           "AND run_id IS NULL", threads)
            if done[0]["n"] == RUNS and idle[0]["n"] == RUNS:
                break
            assert time.monotonic() < deadline, f"{done[0]['n']}/{RUNS} runs terminal, {idle[0]['n']} threads idle"
            await asyncio.sleep(0.5)
        figures["seconds_to_all_terminal"] = round(time.monotonic() - t0, 1)
        await asyncio.sleep(1.0)  # the live observer catches up with the last chunks
        replay = await read_all(settings.kafka_bootstrap, chunk_topics)
        lifecycle = await read_all(settings.kafka_bootstrap, [topics.lifecycle], partitions=settings.partitions)
    finally:
        await live.stop()
        for inst in [*workers, *orchestrators]:
            if inst not in ("processor_worker-1", "run_orchestrator-1") and inst in services.procs:
                services.stop(inst)
        for name in ("processor_worker", "run_orchestrator"):
            if f"{name}-1" not in services.procs:
                services.start(name, f"{name}-1")
    runs = {r["run_id"]: r for r in await rows(cluster.dsn, "SELECT * FROM runs WHERE run_id = ANY($1::text[])", run_ids)}
    stored: dict[str, list] = {}
    for m in await rows(cluster.dsn, "SELECT run_id, role FROM messages WHERE run_id = ANY($1::text[]) ORDER BY position",
                        run_ids):
        stored.setdefault(m["run_id"], []).append(m)
    effects = await rows(cluster.dsn, "SELECT run_id, tool_call_id, pid FROM chaos_effects WHERE run_id = ANY($1::text[])",
                         run_ids)
    fig = check_runs(observed=[live.chunks, replay], run_ids=run_ids, runs=runs, messages=stored,
                     lifecycle=lifecycle, effects=effects, killed_pids=killed_pids)
    report = {**figures, **fig.as_dict(),
              "command": os.environ.get("THREADLINE_CHAOS_COMMAND", "pytest tests/e2e/test_chaos.py")}
    print(json.dumps(report, indent=1))
    if REPORT:
        Path(REPORT).write_text(json.dumps(report, indent=1) + "\n")
    assert fig.ok, fig.problems[:20]
    assert figures["kills"] == 2 * ROUNDS and figures["broker_restarts"] == 1
    assert fig.chunks_checked > RUNS * 20
