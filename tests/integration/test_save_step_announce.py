"""Migration 0026's ``threadline_save_step_announce`` (decision 103), on PostgreSQL: a continued
step that the orchestrator would only announce is announced by the statement that stores it, with
the same outcome as the result's trip through the orchestrator (the run's row, the lifecycle
events in order, a later ``StartRun`` ignored); in every other case it writes what 0017's
``threadline_save_step_claim`` writes; and it leaves the announcement to the orchestrator while a
lifecycle record of the thread that another process queued is not published yet."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import asyncpg
import orjson
import pytest

from tests.integration.pg import leased_run
from tests.integration.test_save_step_claim import _VOLATILE, _call, _neutral, _setup, _snapshot
from threadline.events import StartRun, StepResult
from threadline.runtime.step.ports import RunState, StepRun
from threadline.store import orchestration, steps
from threadline.store.db import Database, connect
from threadline.topics import Topics
from threadline.worker.step_store import announcement

CASES = {
    "first": {"results_applied": 1},
    "later": {"continued_from": 0, "results_applied": 1},
    "aborted": {"status": "aborted", "results_applied": 1},
    "moved": {"run_step": 2, "results_applied": 1},
    "stale-epoch": {"epoch": 4, "results_applied": 1},
    "stale-attempt": {"attempt": 1, "results_applied": 1},
    "an earlier result not applied": {},
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
async def test_without_an_announcement_the_statement_writes_what_0017s_writes(own_cluster, case):
    """``first`` and ``later`` are called without lifecycle records (a worker that does not
    announce); the others with them, and each fails one condition of the announcement."""
    conn = await connect(own_cluster.dsn)
    try:
        seen = {}
        for fn in ("threadline_save_step_claim", "threadline_save_step_announce"):
            p = f"{fn[-5:]}{uuid.uuid4().hex[:8]}"
            await _setup(conn, p, case)
            await conn.execute("UPDATE runs SET results_applied = $2 WHERE run_id = $1", f"{p}-r",
                               case.get("results_applied", 0))
            life = None if case in (CASES["first"], CASES["later"]) else [b"{}"]
            extra = ("lifecycle", [[["h", "v"]]], life, 0, [])
            returned = await _call(conn, fn, p, case, extra=extra if fn.endswith("announce") else ())
            returned.pop("state", None)
            assert returned.pop("announced", None) is None
            kept = {k: v for k, v in returned.items() if k not in _VOLATILE}
            seen[fn] = _neutral({"returned": kept, **(await _snapshot(conn, p))}, p)
        assert seen["threadline_save_step_announce"] == seen["threadline_save_step_claim"]
    finally:
        await conn.close()


def _step_run(p: str, step: int) -> StepRun:
    return StepRun(run_id=f"{p}-r", resource_id="res", thread_id=f"{p}-t", agent_id="agent", epoch=3, step=step,
                   next_seq=2000000, options={}, state=RunState.of({}))


def _result(p: str, step: int) -> StepResult:
    return StepResult(run_id=f"{p}-r", resource_id="res", thread_id=f"{p}-t", step=step, attempt=1, epoch=3,
                      outcome="continue", event_id=f"{p}-ev")


async def _run(conn: asyncpg.Connection, p: str, step: int, **columns: Any) -> None:
    await leased_run(conn, run_id=f"{p}-r", thread_id=f"{p}-t", resource_id="res", step=step, steps_done=step,
                     attempt=1, status="running", step_started=True, step_owner="w1",
                     step_heartbeat=datetime.now(UTC), next_seq=2000000, options={}, state={},
                     results_applied=step, **columns)


async def _save(conn: asyncpg.Connection, p: str, step: int, topics: Topics,
                announce: steps.Announcement | None) -> tuple[int | None, asyncpg.Record]:
    box, _, _, row = await steps.save_step_continue(
        conn, topics=topics, run={"run_id": f"{p}-r", "thread_id": f"{p}-t", "resource_id": "res", "epoch": 3,
                                  "step": step},
        entries=[], consumed=None, state={"s": step}, next_seq=2000000, result=_result(p, step), lease_ttl_s=30.0,
        owner="w2", announce=announce)
    return box, row


async def _after(conn: asyncpg.Connection, p: str, topics: Topics) -> dict[str, Any]:
    run = await conn.fetchrow("SELECT step, steps_done, attempt, status, continued_from, results_applied, "
                              "start_announced, step_owner, next_seq, state FROM runs WHERE run_id = $1", f"{p}-r")
    rows = await conn.fetch("SELECT topic, value FROM outbox WHERE key = $1 ORDER BY id", f"res:{p}-t")
    events = [orjson.loads(r["value"]) for r in rows if r["topic"] == topics.lifecycle]
    return _neutral({"run": dict(run), "lifecycle": [(e["type"], e.get("step"), e["run_id"], e["agent_id"])
                                                     for e in events],
                     "results": sum(r["topic"] == topics.step_results for r in rows)}, p)


@pytest.mark.parametrize("start_announced", [True, False], ids=["start announced", "start not announced"])
async def test_the_statements_announcement_is_what_the_orchestrator_does_with_the_result(own_cluster,
                                                                                        start_announced):
    topics = Topics(own_cluster.prefix)
    step = 1 if start_announced else 0  # a run whose start is not announced is one ingress started: step 0
    async with Database(own_cluster.dsn, max_size=1) as db, db.connection() as conn:
        seen = {}
        for path in ("orchestrator", "statement"):
            p = f"sa{uuid.uuid4().hex[:10]}"
            await _run(conn, p, step, continued_from=None, start_announced=start_announced)
            announce = announcement(_step_run(p, step), topics.lifecycle, []) if path == "statement" else None
            box, row = await _save(conn, p, step, topics, announce)
            assert row["outcome"] == "claimed"
            if path == "orchestrator":
                assert box is not None
                await orchestration.on_step_result(conn, _result(p, step), topics, 30.0)
            else:
                assert box is None and len(row["announced"]) == (1 if start_announced else 3)
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
        await _run(conn, p, 1, continued_from=0, start_announced=True)
        topic = topics.step_results if other == "another topic" else topics.lifecycle
        box_id = await conn.fetchval("INSERT INTO outbox (topic, key, value, published_at) VALUES ($1, $2, $3, $4) "
                                     "RETURNING id", topic, f"res:{p}-t", b"{}",
                                     datetime.now(UTC) if other == "published" else None)
        own = [box_id] if other == "own" else [box_id + 1_000_000]
        box, row = await _save(conn, p, 1, topics, announcement(_step_run(p, 1), topics.lifecycle, own))
        applied = await conn.fetchval("SELECT results_applied FROM runs WHERE run_id = $1", f"{p}-r")
        assert row["outcome"] == "claimed"
        if other == "unpublished":
            assert box is not None and row["announced"] is None and applied == 1
        else:
            assert box is None and len(row["announced"]) == 1 and applied == 2
