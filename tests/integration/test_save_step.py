"""Migration 0027's ``threadline_save_step`` (decision 106), on PostgreSQL: the one statement that
stores a step and applies the worker's plan writes, in every case the worker meets, what the
three statements it replaced wrote (recorded in ``data/save_step_cases.json``, see
:mod:`tests.integration.save_step_cases`): the store only; the store and the next step's claim;
the store, the claim and the announcement. Its announcement is what the orchestrator does with
the step's result, and the database holds each step function once."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import asyncpg
import orjson
import pytest

from tests.integration.pg import leased_run
from tests.integration.save_step_cases import CASES, RECORDED, lifecycle, messages, neutral, set_up, snapshot
from threadline.events import StartRun, StepResult
from threadline.flows import orchestration
from threadline.orchestration.runs import AnnounceStored, RunRow, plan_save
from threadline.runtime.step.ports import RunState, StepRun
from threadline.store import steps
from threadline.store.db import Database, connect
from threadline.topics import Topics
from threadline.worker.step_store import announcement


async def _save(conn: asyncpg.Connection, p: str, case: dict[str, Any], own: list[int]) -> dict[str, Any]:
    """The case's save through the statement, as the worker sends it (raw records, so the outbox rows
    compare with the recorded ones)."""
    claim = {"owner": "w2", "seq_block": steps.SEQ_BLOCK} if case["plan"] != "store" else None
    plan = life = None
    if case["plan"] == "announce":
        life, start = lifecycle()
        plan = {"applied": 1, "topic": "lifecycle", "start_rows": start, "headers": [[["h", "v"]]] * len(life),
                "own": own}
    try:
        async with conn.transaction():
            row = await conn.fetchrow(
                steps._SAVE, f"{p}-r", case.get("epoch", 3), 1, case.get("attempt", 2), 30.0, messages(p),
                [f"{p}-s-consumed"], {"step": 1, "ml": messages(p)}, 3000123, case.get("final"), "step-results",
                f"res:{p}-t", [["h", "v"]], p.encode(), claim, plan, life)
    except asyncpg.PostgresError as exc:
        return {"error": exc.sqlstate}
    assert row is not None
    return {"stored": row["box"] is not None, "claimed": row["claimed"], "signals": row["next_signals"],
            "announced": len(row["announced"] or [])}


@pytest.mark.parametrize("name", CASES)
async def test_the_one_save_writes_what_the_statements_it_replaced_wrote(own_cluster, name):
    recorded = orjson.loads(RECORDED.read_bytes())[name]
    case = CASES[name]
    conn = await connect(own_cluster.dsn)
    try:
        p = f"c{uuid.uuid4().hex[:10]}"
        own = await set_up(conn, p, case)
        returned = await _save(conn, p, case, own)
        seen = neutral({"returned": returned, **(await snapshot(conn, p))}, p)
    finally:
        await conn.close()
    assert seen == recorded
    # the cases exercise what they claim to
    assert ("error" in returned) == (name.endswith(("stale-epoch", "stale-attempt")))
    if name in ("claim/first", "claim/later", "announce/first", "announce/later", "announce/start-unannounced"):
        assert returned["claimed"] and seen["runs"][0]["step"] == 2
    if name in ("announce/first", "announce/later", "announce/own-unpublished"):
        assert returned["announced"] == 1 and not returned["stored"]
    if name == "announce/start-unannounced":
        assert returned["announced"] == 3 and seen["runs"][0]["start_announced"]


def _step_run(p: str, step: int) -> StepRun:
    return StepRun(run_id=f"{p}-r", resource_id="res", thread_id=f"{p}-t", agent_id="agent", epoch=3, step=step,
                   next_seq=2000000, options={}, state=RunState.of({}))


def _result(p: str, step: int) -> StepResult:
    return StepResult(run_id=f"{p}-r", resource_id="res", thread_id=f"{p}-t", step=step, attempt=1, epoch=3,
                      outcome="continue", event_id=f"{p}-ev")


async def _after(conn: asyncpg.Connection, p: str, topics: Topics) -> dict[str, Any]:
    run = await conn.fetchrow("SELECT step, steps_done, attempt, status, continued_from, results_applied, "
                              "start_announced, step_owner, next_seq, state FROM runs WHERE run_id = $1", f"{p}-r")
    rows = await conn.fetch("SELECT topic, value FROM outbox WHERE key = $1 ORDER BY id", f"res:{p}-t")
    events = [orjson.loads(r["value"]) for r in rows if r["topic"] == topics.lifecycle]
    return neutral({"run": dict(run), "lifecycle": [(e["type"], e.get("step"), e["run_id"], e["agent_id"])
                                                    for e in events],
                    "results": sum(r["topic"] == topics.step_results for r in rows)}, p)


@pytest.mark.parametrize("start_announced", [True, False], ids=["start announced", "start not announced"])
async def test_the_statements_announcement_is_what_the_orchestrator_does_with_the_result(own_cluster,
                                                                                        start_announced):
    """The same run stored twice: once the step's plan without its announcement, the result then
    applied by the orchestrator; once with the announcement the worker plans
    (:func:`~threadline.orchestration.runs.plan_save`). Same run row, same lifecycle events."""
    topics = Topics(own_cluster.prefix)
    step = 1 if start_announced else 0  # a run whose start is not announced is one ingress started: step 0
    async with Database(own_cluster.dsn, max_size=1) as db, db.connection() as conn:
        seen = {}
        for path in ("orchestrator", "statement"):
            p = f"sa{uuid.uuid4().hex[:10]}"
            await leased_run(conn, run_id=f"{p}-r", thread_id=f"{p}-t", resource_id="res", step=step,
                             steps_done=step, attempt=1, status="running", step_started=True, step_owner="w1",
                             step_heartbeat=datetime.now(UTC), next_seq=2000000, options={}, state={},
                             results_applied=step, start_announced=start_announced)
            view = RunRow.stored_by_worker(run_id=f"{p}-r", resource_id="res", thread_id=f"{p}-t",
                                           agent_id="agent", epoch=3, step=step, attempt=1)
            plan = plan_save(view, _result(p, step))
            assert isinstance(plan.announce, AnnounceStored) and plan.claim is not None
            announce = announcement(_step_run(p, step), plan.announce, topics.lifecycle, [])
            saved = await steps.save_step(
                conn, topics=topics, run={"run_id": f"{p}-r", "thread_id": f"{p}-t", "resource_id": "res",
                                          "epoch": 3, "step": step},
                entries=[], consumed=None, state={"s": step}, next_seq=2000000, result=_result(p, step),
                final_fields=None, lease_ttl_s=30.0, claim_for="w2",
                announce=announce if path == "statement" else None)
            assert saved.claimed
            if path == "orchestrator":
                assert saved.box is not None and saved.announced == []
                await orchestration.on_step_result(conn, _result(p, step), topics, 30.0)
            else:
                assert saved.box is None and len(saved.announced) == (1 if start_announced else 3)
            start = StartRun(run_id=f"{p}-r", resource_id="res", thread_id=f"{p}-t", epoch=3, scheduled=True)
            assert await orchestration.start_run(conn, start, topics) == []  # the start is told once
            seen[path] = await _after(conn, p, topics)
        assert seen["orchestrator"]["results"] == 1 and seen["statement"]["results"] == 0
        assert {**seen["statement"], "results": 1} == seen["orchestrator"]
        kinds = [e[0] for e in seen["statement"]["lifecycle"]]
        assert kinds == (["step_finished"] if start_announced else ["thread_active", "run_started", "step_finished"])
        assert seen["statement"]["run"]["results_applied"] == step + 1


@pytest.mark.parametrize("other", ["unpublished", "own", "published", "another topic"])
async def test_an_unpublished_lifecycle_row_of_another_writer_leaves_the_announcement_to_the_orchestrator(
        own_cluster, other):
    """The thread's lifecycle records leave in id order: a row another process queued and did not
    publish yet (say the orchestrator's ``step_finished`` of the step before, its flush in flight)
    must reach Kafka before this step's. The worker's own rows (``own``) it publishes in order
    itself; a published row, or one of another topic, is no reason to wait."""
    topics = Topics(own_cluster.prefix)
    async with Database(own_cluster.dsn, max_size=1) as db, db.connection() as conn:
        p = f"sa{uuid.uuid4().hex[:10]}"
        await leased_run(conn, run_id=f"{p}-r", thread_id=f"{p}-t", resource_id="res", step=1, steps_done=1,
                         attempt=1, status="running", step_started=True, step_owner="w1",
                         step_heartbeat=datetime.now(UTC), next_seq=2000000, options={}, state={},
                         results_applied=1, continued_from=0, start_announced=True)
        topic = topics.step_results if other == "another topic" else topics.lifecycle
        box_id = await conn.fetchval("INSERT INTO outbox (topic, key, value, published_at) VALUES ($1, $2, $3, $4) "
                                     "RETURNING id", topic, f"res:{p}-t", b"{}",
                                     datetime.now(UTC) if other == "published" else None)
        own = [box_id] if other == "own" else [box_id + 1_000_000]
        plan = AnnounceStored(applied=1, finished_step=1, start=("thread_active", "run_started"))
        saved = await steps.save_step(
            conn, topics=topics, run={"run_id": f"{p}-r", "thread_id": f"{p}-t", "resource_id": "res", "epoch": 3,
                                      "step": 1},
            entries=[], consumed=None, state={}, next_seq=2000000, result=_result(p, 1), final_fields=None,
            lease_ttl_s=30.0, claim_for="w2", announce=announcement(_step_run(p, 1), plan, topics.lifecycle, own))
        applied = await conn.fetchval("SELECT results_applied FROM runs WHERE run_id = $1", f"{p}-r")
        assert saved.claimed
        if other == "unpublished":
            assert saved.box is not None and saved.announced == [] and applied == 1
        else:
            assert saved.box is None and len(saved.announced) == 1 and applied == 2


async def test_each_step_function_is_defined_once_and_the_retired_ones_are_gone(own_cluster):
    conn = await connect(own_cluster.dsn)
    try:
        rows = await conn.fetch("SELECT proname, count(*) AS n FROM pg_proc WHERE proname LIKE 'threadline_%step%' "
                                "GROUP BY proname ORDER BY proname")
    finally:
        await conn.close()
    assert {r["proname"]: r["n"] for r in rows} == {"threadline_begin_step": 1, "threadline_save_step": 1}
