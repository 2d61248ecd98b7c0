"""The store side of ingress starting a run (docs/decisions.md 34-35), on PostgreSQL: the wake's
transaction queues step 0's task and a ``scheduled`` ``StartRun``; whichever orchestrator
transaction on the run comes first (that ``StartRun``, a step result or an abort that overtook it,
a sweeper failure) announces the start before anything else about the run, exactly once."""

from __future__ import annotations

import uuid
from typing import Any

import orjson

from tests.integration.pg import statements as logged
from threadline.events import AbortRun, StartRun, StepResult
from threadline.flows.orchestration import abort_run, on_step_result, start_run
from threadline.flows.routing import route
from threadline.orchestration.routing import Inbound
from threadline.store.db import Database
from threadline.topics import Topics


async def _wake(db: Database, topics: Topics, *, starts: bool) -> tuple[str, str, list[tuple[str, dict[str, Any]]]]:
    """Route a ``stream`` on a fresh thread; return (run id, thread id, the outbox rows it queued)."""
    thread = f"th-is-{uuid.uuid4().hex[:8]}"
    req = Inbound(event_id=f"req-{uuid.uuid4().hex}", kind="stream", agent_id="agent", resource_id="res-is",
                  thread_id=thread, body="hello")
    async with db.connection() as conn:
        routed = await route(conn, req, topics=topics, lease_ttl_s=60, agent_known=True, starts=starts)
        queued = await conn.fetch("SELECT topic, value FROM outbox WHERE id = ANY($1::bigint[]) ORDER BY id",
                                  [int(i) for i in routed.outbox_ids])
    assert routed.reply is not None
    run_id = routed.reply.run_id  # type: ignore[union-attr]  # a wake answers Accepted
    return run_id, thread, [(r["topic"], orjson.loads(r["value"])) for r in queued]


async def _lifecycle(db: Database, topics: Topics, ids: list[int]) -> list[str]:
    rows = await db.fetch("SELECT value FROM outbox WHERE id = ANY($1::bigint[]) AND topic = $2 ORDER BY id",
                          [int(i) for i in ids], topics.lifecycle)
    return [orjson.loads(r["value"])["type"] for r in rows]


async def _val(db: Database, query: str, *args: Any) -> Any:
    row = await db.fetchrow(query, *args)
    return None if row is None else row[0]


def _start_of(queued: list[tuple[str, dict[str, Any]]], topics: Topics) -> StartRun:
    (body,) = [b for t, b in queued if t == topics.run_commands]
    return StartRun.model_validate(body)


async def test_the_wake_queues_step_zero_and_a_scheduled_start(own_cluster):
    topics = Topics(own_cluster.prefix)
    async with Database(own_cluster.dsn, max_size=2) as db:
        run_id, _, queued = await _wake(db, topics, starts=True)
        assert [t for t, _ in queued] == [topics.replies, topics.step_tasks, topics.run_commands]
        task = queued[1][1]
        assert (task["type"], task["run_id"], task["step"], task["attempt"]) == ("step_task", run_id, 0, 1)
        assert _start_of(queued, topics).scheduled
        assert await _val(db, "SELECT start_announced FROM runs WHERE run_id = $1", run_id) is False
        async with db.connection() as conn:
            ids = await start_run(conn, _start_of(queued, topics), topics)
        assert await _lifecycle(db, topics, ids) == ["thread_active", "run_started"]
        assert not [i for i in ids if i not in ids[:2]]  # no second step task
        assert await _val(db, "SELECT start_announced FROM runs WHERE run_id = $1", run_id) is True

        off_id, _, off = await _wake(db, topics, starts=False)  # the setting off: the orchestrator schedules
        assert [t for t, _ in off] == [topics.replies, topics.run_commands] and not _start_of(off, topics).scheduled
        assert await _val(db, "SELECT start_announced FROM runs WHERE run_id = $1", off_id) is True


async def test_a_step_result_that_overtakes_the_start_announces_it_first(own_cluster):
    topics = Topics(own_cluster.prefix)
    async with Database(own_cluster.dsn, max_size=2) as db:
        run_id, thread, queued = await _wake(db, topics, starts=True)
        await db.execute("UPDATE runs SET steps_done = 1, status = 'finished', step_started = true WHERE run_id = $1",
                         run_id)
        await db.execute("UPDATE signals SET status = 'consumed' WHERE run_id = $1", run_id)  # as the step's store
        epoch = await _val(db, "SELECT epoch FROM runs WHERE run_id = $1", run_id)
        res = StepResult(run_id=run_id, resource_id="res-is", thread_id=thread, step=0, attempt=1, epoch=epoch,
                         outcome="finished", finish_reason="stop", text="hi")
        async with db.connection() as conn:
            ids = await on_step_result(conn, res, topics, lease_ttl_s=60)
            late = await start_run(conn, _start_of(queued, topics), topics)
        assert await _lifecycle(db, topics, ids) == ["thread_active", "run_started", "step_finished", "run_finished",
                                                     "thread_idle"]
        assert late == []  # announced once


async def test_an_abort_that_overtakes_the_start_announces_it_first(own_cluster):
    topics = Topics(own_cluster.prefix)
    async with Database(own_cluster.dsn, max_size=2) as db:
        run_id, thread, queued = await _wake(db, topics, starts=True)
        async with db.connection() as conn:
            ids = await abort_run(conn, AbortRun(resource_id="res-is", thread_id=thread, run_id=run_id), topics,
                                  lease_ttl_s=60)
            late = await start_run(conn, _start_of(queued, topics), topics)
        assert await _lifecycle(db, topics, ids) == ["thread_active", "run_started", "run_aborted", "thread_idle"]
        assert late == []
        # step 0 still outstanding: the worker that gets its task ends the stream (not the orchestrator)
        assert await _val(db, "SELECT terminal_emitted FROM runs WHERE run_id = $1", run_id) is False


async def test_a_wake_writes_its_run_in_one_statement_after_the_thread_is_locked(own_cluster):
    """Decisions 93, 94 and 96: event claim, thread and lease lock in one statement, then one statement takes the lease,
    creates the run, stores the signal, queues the three records and remembers the reply."""
    topics = Topics(own_cluster.prefix)
    async with Database(own_cluster.dsn, max_size=1) as db:
        await _wake(db, topics, starts=True)  # the connection learns the statement's types (asyncpg asks once)
        thread = f"th-is-{uuid.uuid4().hex[:8]}"
        await db.execute("INSERT INTO threads (thread_id, resource_id) VALUES ($1, 'res-is')", thread)
        await db.execute("INSERT INTO thread_leases (thread_id, resource_id, epoch) VALUES ($1, 'res-is', 6)", thread)
        req = Inbound(event_id=f"req-{uuid.uuid4().hex}", kind="stream", agent_id="agent", resource_id="res-is",
                      thread_id=thread, body="hello", run_options={"max_steps": 3})
        async with db.connection() as conn, logged(conn) as sent:
            routed = await route(conn, req, topics=topics, lease_ttl_s=60, agent_known=True, starts=True)
        run_id = routed.reply.run_id  # type: ignore[union-attr]  # a wake answers Accepted
        # BEGIN, the arrival (event claim, thread, lease row inserted if missing and locked: decision 96), the wake, COMMIT
        assert len(sent) == 4, sent
        lease = await db.fetchrow("SELECT run_id, epoch, expires_at > now() AS live FROM thread_leases "
                                  "WHERE thread_id = $1", thread)
        assert (lease["run_id"], lease["epoch"], lease["live"]) == (run_id, 7, True)
        run = await db.fetchrow("SELECT epoch, status, kind, request_id, reply_to, options, start_announced "
                                "FROM runs WHERE run_id = $1", run_id)
        assert (run["epoch"], run["status"], run["kind"], run["request_id"], run["reply_to"]) == \
            (7, "running", "stream", req.event_id, topics.replies)
        assert run["options"] == {"max_steps": 3} and run["start_announced"] is False
        sig = await db.fetchrow("SELECT id, mode, status, run_id, request_id, options FROM signals "
                                "WHERE thread_id = $1", thread)
        assert (sig["mode"], sig["status"], sig["run_id"], sig["request_id"]) == ("wake", "pending", run_id,
                                                                                   req.event_id)
        assert sig["options"] == {"reply_to": None, "kind": "stream"}
        answered = await _val(db, "SELECT result FROM processed_events WHERE consumer = 'ingress' "
                                  "AND event_id = $1", req.event_id)
        assert answered["run_id"] == run_id and answered["action"] == "wake"
        queued = await db.fetch("SELECT id, topic, value FROM outbox WHERE id = ANY($1::bigint[]) ORDER BY id",
                                [int(i) for i in routed.outbox_ids])
        assert [int(i) for i in routed.outbox_ids] == [r["id"] for r in queued]  # ids in the records' order
        assert [r["topic"] for r in queued] == [topics.replies, topics.step_tasks, topics.run_commands]
        assert [orjson.loads(r["value"])["epoch"] for r in queued[1:]] == [7, 7]
        assert [i.row.value for i in routed.outbox_ids] == [r["value"] for r in queued]  # flushed from memory
