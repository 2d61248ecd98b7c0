"""Durable sub-agent calls (migration 0023, decisions 76-79): the writes that record a suspended
step's calls (worker), start the child runs (orchestrator, applying the ``suspended`` result),
store a child's outcome as its parent's tool result once, and resume the parent when none of
its step's children is outstanding. Each runs in the caller's transaction.

Lock order: a transaction ending a child holds the child's lease and run rows, then locks the
parent's (lease row first); no transaction on a parent locks a child's rows (an abort of the
parent reaches its children through ``abort_run`` commands in the outbox), so the order never
inverts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg

from threadline.errors import ToolTimeoutError
from threadline.events import AbortRun, LifecycleEvent, StartRun, StepTask
from threadline.events.signals import signal_from_message
from threadline.logging import get_logger
from threadline.orchestration.children import PARENT_OPTION, ChildRequest, child_outcome, depth_of
from threadline.store import leases, outbox
from threadline.store.runs import create_run, insert_signal
from threadline.topics import Topics, thread_key

log = get_logger(__name__)


async def record_child_requests(conn: asyncpg.Connection, run_id: str, step: int,
                                requests: Sequence[ChildRequest]) -> None:
    """Record the sub-agent calls of step ``step`` (worker, in the transaction that stores the
    step; a re-execution records the same ids again, which changes nothing)."""
    await conn.executemany(
        "INSERT INTO sub_agent_calls (parent_run_id, tool_call_id, parent_step, tool_name, agent_id, child_run_id, "
        "child_thread_id, prompt) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING",
        [(run_id, r.tool_call_id, step, r.tool_name, r.agent_id, r.child_run_id, r.child_thread_id, r.prompt)
         for r in requests])


async def start_children(conn: asyncpg.Connection, parent: asyncpg.Record, step: int, topics: Topics,
                         lease_ttl_s: float) -> list[int]:
    """Applying a ``suspended`` step result (the parent's lease and run rows locked): create each
    requested child run — its own thread (``threads`` row, metadata naming the parent), its lease,
    the run (``parent_run_id``), the prompt as its waking input — and publish its step 0 task and
    a ``scheduled`` ``start_run``; mark the parent waiting, its lease kept without expiry (no
    worker renews it meanwhile; an abort or the resumed step sets it again). Returns the outbox
    ids. A parent whose step has no requested call left is resumed at once."""
    ids: list[int] = []
    rows = await conn.fetch("SELECT * FROM sub_agent_calls WHERE parent_run_id = $1 AND parent_step = $2 "
                            "AND status = 'requested' ORDER BY created_at, tool_call_id", parent["run_id"], step)
    request_context = (parent["options"] or {}).get("request_context")
    for row in rows:
        resource, thread = parent["resource_id"], row["child_thread_id"]
        await conn.execute(
            "INSERT INTO threads (thread_id, resource_id, metadata) VALUES ($1, $2, $3) ON CONFLICT (thread_id) DO NOTHING",
            thread, resource, {"parentRunId": parent["run_id"], "parentThreadId": parent["thread_id"],
                               "toolCallId": row["tool_call_id"]})
        lease = await leases.lock_thread(conn, resource, thread)
        if lease.active:  # cannot happen for a thread made for this call; logged, the call fails below
            log.error("sub-agent thread busy", thread_id=thread, holder=lease.run_id)
        epoch = await leases.take(conn, lease, row["child_run_id"], lease_ttl_s)
        options: dict[str, Any] = {"request_context": request_context} if request_context else {}
        options[PARENT_OPTION] = {"run_id": parent["run_id"], "resource_id": parent["resource_id"],
                                  "thread_id": parent["thread_id"], "tool_call_id": row["tool_call_id"],
                                  "tool_name": row["tool_name"], "depth": depth_of(parent["options"] or {}) + 1}
        await create_run(conn, run_id=row["child_run_id"], agent_id=row["agent_id"], resource_id=resource,
                         thread_id=thread, epoch=epoch, options=options, kind="stream", request_id=None,
                         reply_to=None, start_announced=False)
        await conn.execute("UPDATE runs SET parent_run_id = $2, parent_tool_call_id = $3 WHERE run_id = $1",
                           row["child_run_id"], parent["run_id"], row["tool_call_id"])
        signal = signal_from_message(row["prompt"])
        signal["userInput"] = True  # the child's own call input: a user message, as Mastra's sub-agent gets
        await insert_signal(conn, signal, thread_id=thread, resource_id=resource, agent_id=row["agent_id"],
                            request_id=f"sub:{row['child_run_id']}", mode="wake", status="pending",
                            run_id=row["child_run_id"], options={"kind": "stream"})
        key = thread_key(resource, thread)
        ids.append(await outbox.add(conn, topics.step_tasks, StepTask(
            run_id=row["child_run_id"], resource_id=resource, thread_id=thread, step=0, attempt=1, epoch=epoch),
            key=key))
        ids.append(await outbox.add(conn, topics.run_commands, StartRun(
            run_id=row["child_run_id"], resource_id=resource, thread_id=thread, epoch=epoch, scheduled=True),
            key=key))
        await conn.execute("UPDATE sub_agent_calls SET status = 'running' WHERE child_run_id = $1",
                           row["child_run_id"])
    await conn.execute("UPDATE runs SET waiting_children = true, results_applied = $2 + 1, updated_at = now() "
                       "WHERE run_id = $1", parent["run_id"], step)
    await conn.execute("UPDATE thread_leases SET expires_at = 'infinity', updated_at = now() "
                       "WHERE thread_id = $1 AND run_id = $2 AND epoch = $3",
                       parent["thread_id"], parent["run_id"], parent["epoch"])
    key = thread_key(parent["resource_id"], parent["thread_id"])
    ids.append(await outbox.add(conn, topics.lifecycle, LifecycleEvent(
        type="step_finished", resource_id=parent["resource_id"], thread_id=parent["thread_id"],
        run_id=parent["run_id"], agent_id=parent["agent_id"], step=step), key=key))
    ids += await resume_when_answered(conn, parent["run_id"], step, topics, lease_ttl_s)
    return ids


async def child_ended(conn: asyncpg.Connection, child: asyncpg.Record, status: str, text: str | None,
                      error: object, topics: Topics, lease_ttl_s: float) -> list[int]:
    """A run with a parent ended (``status``): store its outcome as the parent's tool result (the
    first record wins: once), mark the call done, and schedule the parent's next step when no
    call of its step is outstanding. Returns the outbox ids."""
    call = await conn.fetchrow("SELECT * FROM sub_agent_calls WHERE child_run_id = $1", child["run_id"])
    if call is None or call["status"] == "done":
        return []
    result, tool_error = child_outcome(status, text, error)
    if result is not None:
        result = {**result, "subAgentRunId": child["run_id"], "subAgentThreadId": child["thread_id"],
                  "subAgentResourceId": child["resource_id"]}
    await conn.execute("INSERT INTO tool_calls (run_id, tool_call_id, tool_name, result, error) "
                       "VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
                       call["parent_run_id"], call["tool_call_id"], call["tool_name"], result, tool_error)
    await conn.execute("UPDATE sub_agent_calls SET status = 'done', ended_at = now() WHERE child_run_id = $1",
                       child["run_id"])
    return await resume_when_answered(conn, call["parent_run_id"], call["parent_step"], topics, lease_ttl_s)


async def resume_when_answered(conn: asyncpg.Connection, parent_run_id: str, step: int, topics: Topics,
                  lease_ttl_s: float) -> list[int]:
    """Schedule step + 1 of a waiting parent whose step ``step`` has no outstanding call: no
    child run still running, no call the suspended step holds (its state's ``approval_calls``;
    not a call an attempt discarded by a processor retry held) still pending (decision 226)."""
    outstanding = await conn.fetchval(
        "SELECT (SELECT count(*) FROM sub_agent_calls WHERE parent_run_id = $1 AND parent_step = $2 "
        "AND status <> 'done') + (SELECT count(*) FROM tool_approvals WHERE run_id = $1 AND step = $2 "
        "AND status = 'pending' AND tool_call_id IN (SELECT c->>'toolCallId' FROM runs r, "
        "jsonb_array_elements(COALESCE(r.state->'approval_calls', '[]'::jsonb)) c WHERE r.run_id = $1))",
        parent_run_id, step)
    if outstanding:
        return []
    where = await conn.fetchrow("SELECT resource_id, thread_id FROM runs WHERE run_id = $1", parent_run_id)
    if where is None:
        return []
    await leases.lock_row(conn, where["thread_id"])  # the lease row before the run's
    run = await conn.fetchrow("SELECT * FROM runs WHERE run_id = $1 FOR UPDATE", parent_run_id)
    if run is None or run["status"] != "running" or not run["waiting_children"] or run["step"] != step:
        return []  # aborted or failed meanwhile, or resumed already
    holds = await conn.fetchval(
        "UPDATE thread_leases SET expires_at = now() + make_interval(secs => $4), updated_at = now() "
        "WHERE thread_id = $1 AND run_id = $2 AND epoch = $3 RETURNING 1",
        run["thread_id"], run["run_id"], run["epoch"], lease_ttl_s)
    if not holds:
        return []
    await conn.execute("UPDATE runs SET step = step + 1, attempt = 1, step_started = false, continued_from = NULL, "
                       "waiting_children = false, updated_at = now() WHERE run_id = $1", parent_run_id)
    task = StepTask(run_id=parent_run_id, resource_id=run["resource_id"], thread_id=run["thread_id"], step=step + 1,
                    attempt=1, epoch=run["epoch"])
    return [await outbox.add(conn, topics.step_tasks, task, key=thread_key(run["resource_id"], run["thread_id"]))]


async def overdue_calls(conn: asyncpg.Connection, timeout_s: float) -> list[tuple[str, str]]:
    """``(parent_run_id, tool_call_id)`` of the running sub-agent calls made more than
    ``timeout_s`` seconds ago (decision 218)."""
    rows = await conn.fetch("SELECT parent_run_id, tool_call_id FROM sub_agent_calls WHERE status = 'running' "
                            "AND created_at < now() - make_interval(secs => $1) ORDER BY created_at LIMIT 100",
                            timeout_s)
    return [(r["parent_run_id"], r["tool_call_id"]) for r in rows]


async def time_out_call(conn: asyncpg.Connection, parent_run_id: str, tool_call_id: str, timeout_s: float,
                        topics: Topics, lease_ttl_s: float) -> list[int]:
    """End a sub-agent call past its deadline, as its child's end would: the parent's tool result
    is a ``ToolTimeoutError`` (first record wins), the call is done, the child gets an
    ``abort_run`` (through the outbox: no child row is locked here, the lock order above), and the
    parent's next step is scheduled when no call of its step is outstanding. Nothing when the
    call ended meanwhile (or another instance holds it). Returns the outbox ids."""
    call = await conn.fetchrow("SELECT c.*, r.resource_id FROM sub_agent_calls c JOIN runs r ON r.run_id = c.child_run_id "
                               "WHERE c.parent_run_id = $1 AND c.tool_call_id = $2 AND c.status = 'running' "
                               "FOR UPDATE OF c SKIP LOCKED", parent_run_id, tool_call_id)
    if call is None:
        return []
    error = str(ToolTimeoutError(what=f"tool {call['tool_name']}", timeout_s=timeout_s))
    await conn.execute("INSERT INTO tool_calls (run_id, tool_call_id, tool_name, result, error) "
                       "VALUES ($1, $2, $3, NULL, $4) ON CONFLICT DO NOTHING",
                       parent_run_id, tool_call_id, call["tool_name"], error)
    await conn.execute("UPDATE sub_agent_calls SET status = 'done', ended_at = now() WHERE child_run_id = $1",
                       call["child_run_id"])
    log.warning("sub-agent call timed out; its child run is aborted", parent_run_id=parent_run_id,
                tool_call_id=tool_call_id, child_run_id=call["child_run_id"], timeout_s=timeout_s)
    cmd = AbortRun(resource_id=call["resource_id"], thread_id=call["child_thread_id"], run_id=call["child_run_id"])
    ids = [await outbox.add(conn, topics.run_commands, cmd, key=thread_key(call["resource_id"], call["child_thread_id"]))]
    return ids + await resume_when_answered(conn, parent_run_id, call["parent_step"], topics, lease_ttl_s)


async def abort_children(conn: asyncpg.Connection, parent_run_id: str, topics: Topics) -> list[int]:
    """An aborted (or failed) parent's running children are aborted too: one ``abort_run`` each,
    through the outbox (the children's rows are not locked here: the lock order above)."""
    ids: list[int] = []
    for row in await conn.fetch("SELECT c.child_run_id, c.child_thread_id, r.resource_id FROM sub_agent_calls c "
                                "JOIN runs r ON r.run_id = c.child_run_id "
                                "WHERE c.parent_run_id = $1 AND c.status = 'running'", parent_run_id):
        cmd = AbortRun(resource_id=row["resource_id"], thread_id=row["child_thread_id"], run_id=row["child_run_id"])
        ids.append(await outbox.add(conn, topics.run_commands, cmd, key=thread_key(row["resource_id"],
                                                                               row["child_thread_id"])))
    return ids
