"""A continued step's result announced by one statement (decision 98), on PostgreSQL: the same
outcome as the orchestrator's locked transaction for every run state it may meet, in two round
trips that hold no lock between them."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import asyncpg
import orjson
import pytest

from tests.integration.pg import leased_run, statements
from threadline.events import StepResult
from threadline.flows.orchestration import announce_on, announced, apply_step_result, on_step_result
from threadline.store.db import Database
from threadline.topics import Topics

_RUN = {"step": 2, "steps_done": 2, "status": "running", "epoch": 3, "continued_from": 1, "results_applied": 1,
        "start_announced": True}
"""A run whose worker stored step 1 and claimed step 2 itself: step 1's result is to be announced."""


async def _setup(conn: asyncpg.Connection, p: str, run: dict[str, Any]) -> None:
    await leased_run(conn, run_id=f"{p}-r", thread_id=f"{p}-t", resource_id="res", attempt=1, step_started=True,
                     step_owner="w1", step_heartbeat=datetime.now(UTC), next_seq=2000000, options={}, state={},
                     **run)


def _result(p: str, **fields: Any) -> StepResult:
    return StepResult(**{"run_id": f"{p}-r", "resource_id": "res", "thread_id": f"{p}-t", "step": 1, "attempt": 1,
                         "epoch": 3, "outcome": "continue", "event_id": f"{p}-ev", **fields})


async def _state(conn: asyncpg.Connection, p: str, ids: list[int]) -> dict[str, Any]:
    run = await conn.fetchrow("SELECT step, steps_done, status, results_applied, start_announced FROM runs "
                              "WHERE run_id = $1", f"{p}-r")
    events = [orjson.loads(r["value"]) for r in await conn.fetch(
        "SELECT value FROM outbox WHERE id = ANY($1::bigint[]) ORDER BY id", [int(i) for i in ids])]
    claimed = await conn.fetchval("SELECT count(*) FROM processed_events WHERE event_id = $1", f"{p}-ev")
    return {"run": dict(run), "claimed": claimed,
            "events": [(e["type"], e.get("step")) for e in events]}


CASES = {
    "announce": {},
    "start not announced yet": {"start_announced": False},
    "aborted": {"status": "aborted"},
    "another epoch": {"epoch": 4},
    "applied already": {"results_applied": 2},
    "an earlier result missing": {"results_applied": 0},
    "not continued by the worker": {"continued_from": None, "step": 1, "steps_done": 2},
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
async def test_the_one_statement_announcement_does_what_the_locked_transaction_does(own_cluster, case):
    topics = Topics(own_cluster.prefix)
    async with Database(own_cluster.dsn, max_size=1) as db, db.connection() as conn:
        seen = {}
        for name, apply in (("locked", apply_step_result), ("any", on_step_result)):
            p = f"an{uuid.uuid4().hex[:10]}"
            await _setup(conn, p, {**_RUN, **case})
            ids = await apply(conn, _result(p), topics, 30.0)
            seen[name] = await _state(conn, p, ids)
        assert seen["any"] == seen["locked"]
        if not case:  # the case exercises what it claims to
            assert seen["any"]["events"] == [("step_finished", 1)] and seen["any"]["run"]["results_applied"] == 2


async def test_an_announcement_is_two_statements_and_a_repeat_changes_nothing(own_cluster):
    topics = Topics(own_cluster.prefix)
    async with Database(own_cluster.dsn, max_size=1) as db, db.connection() as conn:
        p = f"an{uuid.uuid4().hex[:10]}"
        await _setup(conn, p, _RUN)
        async with statements(conn) as queries:
            ids = await announced(conn, _result(p), topics)
        assert ids is not None and len(queries) == 2 and not any(q.startswith("BEGIN") for q in queries)
        assert (await _state(conn, p, ids))["events"] == [("step_finished", 1)]
        assert await announced(conn, _result(p), topics) is None  # the redelivered result: applied already
        assert await on_step_result(conn, _result(p), topics, 30.0) == []
        assert await conn.fetchval("SELECT results_applied FROM runs WHERE run_id = $1", f"{p}-r") == 2
        assert await announced(conn, _result(p, step=0, event_id=f"{p}-old"), topics) is None  # an older step


CHANGES = {
    "aborted": "UPDATE runs SET status = 'aborted' WHERE run_id = $1",
    "another epoch": "UPDATE runs SET epoch = 4 WHERE run_id = $1",
    "applied meanwhile": "UPDATE runs SET results_applied = 2 WHERE run_id = $1",
    "the step moved back": "UPDATE runs SET step = 1 WHERE run_id = $1",
    "scheduled by the orchestrator": "UPDATE runs SET continued_from = NULL WHERE run_id = $1",
}


@pytest.mark.parametrize("change", CHANGES.values(), ids=CHANGES.keys())
async def test_a_run_changed_after_the_unlocked_read_is_not_announced(own_cluster, change):
    """The row read without a lock said "announce"; it changed before the statement ran: the
    statement writes nothing, and the locked transaction decides on the row as it is."""
    topics = Topics(own_cluster.prefix)
    async with Database(own_cluster.dsn, max_size=1) as db, db.connection() as conn:
        p = f"an{uuid.uuid4().hex[:10]}"
        await _setup(conn, p, _RUN)
        row = await conn.fetchrow("SELECT * FROM runs WHERE run_id = $1", f"{p}-r")
        await conn.execute(change, f"{p}-r")
        before = await _state(conn, p, [])
        assert await announce_on(conn, _result(p), row, topics) is None
        assert await _state(conn, p, []) == before
        assert await conn.fetchval("SELECT count(*) FROM outbox WHERE key = $1", f"res:{p}-t") == 0
