"""The orchestrator's side of tool approval (decisions 226-227): an approve or decline command
recorded once, the run's next step scheduled when no call of its suspended step is outstanding,
and the ``resolved`` reply; all in one transaction holding the thread's lease row, the run's row
and the call's row (the lock order of :mod:`threadline.store.sub_agents`)."""

from __future__ import annotations

import asyncpg

from threadline.events import ResolveToolCall, ToolCallResolved
from threadline.logging import get_logger
from threadline.orchestration.approvals import on_answer
from threadline.store import approvals, leases, outbox
from threadline.store.processed import claim_event
from threadline.store.sub_agents import resume_when_answered
from threadline.topics import Topics

log = get_logger(__name__)


async def resolve_tool_call(conn: asyncpg.Connection, cmd: ResolveToolCall, topics: Topics,
                            lease_ttl_s: float) -> list[int]:
    """Apply ``cmd`` (:func:`~threadline.orchestration.approvals.on_answer` decides) and answer
    it on ``cmd.reply_to`` when it names one. Returns the outbox ids."""
    ids: list[int] = []
    async with conn.transaction():
        if not await claim_event(conn, "orchestrator", cmd.event_id):
            return ids
        await leases.lock_row(conn, cmd.thread_id)  # the lease row before the run's
        run = await conn.fetchrow("SELECT * FROM runs WHERE run_id = $1 FOR UPDATE", cmd.run_id)
        call = await approvals.held_call(conn, cmd.run_id, cmd.tool_call_id) if run is not None else None
        verdict = on_answer(dict(run) if run is not None else None, dict(call) if call is not None else None,
                            resource_id=cmd.resource_id, thread_id=cmd.thread_id, approved=cmd.approved)
        if verdict.record and call is not None:
            await approvals.answer(conn, cmd.run_id, cmd.tool_call_id, approved=cmd.approved, reason=cmd.reason)
            ids += await resume_when_answered(conn, cmd.run_id, call["step"], topics, lease_ttl_s)
        log.info("tool call answered", run_id=cmd.run_id, tool_call_id=cmd.tool_call_id, approved=cmd.approved,
                 recorded=verdict.record, status=verdict.status)
        if cmd.reply_to and cmd.request_id:
            reply = ToolCallResolved(request_id=cmd.request_id, resolved=verdict.record, status=verdict.status,
                                     run_id=cmd.run_id, tool_call_id=cmd.tool_call_id)
            ids.append(await outbox.add(conn, cmd.reply_to, reply, key=cmd.request_id))
    return ids
