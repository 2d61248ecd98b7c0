"""The orchestrator locks a run's row without its state (decision 105), on PostgreSQL: every
other column is still read, a finished run's statements never fetch the state, and a
``generate`` run's reply still carries the steps its state holds."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import orjson

from tests.integration.pg import leased_run, statements
from threadline.events import StepResult
from threadline.flows.orchestration import apply_step_result
from threadline.store.db import Database
from threadline.store.runs import RUN_ROW_COLUMNS
from threadline.topics import Topics

STEPS = [{"stepNumber": 0, "text": "four", "toolCalls": [], "toolResults": [], "finishReason": "stop"}]


async def _finished_run(db: Database, p: str, kind: str) -> tuple[list[str], list[tuple[str, Any]]]:
    """End a ``kind`` run with a large state; the statements that read its state, and the
    ``(topic, event)`` pairs the end queued."""
    topics = Topics(f"rr{p}")
    async with db.connection() as conn:
        await leased_run(conn, run_id=f"{p}-r", thread_id=f"{p}-t", resource_id="res", step=0, steps_done=1,
                         attempt=1, status="running", step_started=True, step_owner="w1", kind=kind,
                         request_id=f"{p}-req", step_heartbeat=datetime.now(UTC), next_seq=10, options={},
                         state={"steps": STEPS, "message_list": {"messages": [{"id": "m", "text": "x" * 50_000}]}})
        res = StepResult(run_id=f"{p}-r", resource_id="res", thread_id=f"{p}-t", step=0, attempt=1, epoch=3,
                         outcome="finished", finish_reason="stop", text="four", event_id=f"{p}-ev")
        async with statements(conn) as sent:
            ids = await apply_step_result(conn, res, topics, 30.0)
        reads_state = [q for q in sent if "from runs" in q.lower() and ("state" in q.lower() or "*" in q)]
        rows = await conn.fetch("SELECT topic, value FROM outbox WHERE id = ANY($1::bigint[]) ORDER BY id",
                                [int(i) for i in ids])
    return reads_state, [(r["topic"], orjson.loads(r["value"])) for r in rows]


async def test_the_locked_row_is_every_column_but_the_state(own_cluster):
    async with Database(own_cluster.dsn, max_size=1) as db, db.connection() as conn:
        columns = {r["column_name"] for r in await conn.fetch(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'runs'")}
    assert {c.strip() for c in RUN_ROW_COLUMNS.split(",")} == columns - {"state"}


async def test_a_stream_run_ends_without_its_state_read(own_cluster):
    async with Database(own_cluster.dsn, max_size=1) as db:
        reads_state, events = await _finished_run(db, uuid.uuid4().hex[:8], "stream")
    assert reads_state == []
    assert [e["type"] for _, e in events] == ["step_finished", "run_finished", "thread_idle"]


async def test_a_generate_runs_reply_carries_the_steps_of_its_state(own_cluster):
    async with Database(own_cluster.dsn, max_size=1) as db:
        reads_state, events = await _finished_run(db, uuid.uuid4().hex[:8], "generate")
    replies = [e for topic, e in events if topic.endswith("replies")]
    assert len(replies) == 1
    assert replies[0]["steps"] == STEPS
    assert replies[0]["text"] == "four"
    assert len(reads_state) == 1  # the steps only, for the reply
