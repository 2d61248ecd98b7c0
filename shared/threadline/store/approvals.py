"""Calls held for a person's approval (migration 0034, decisions 225-227): recorded by the worker
with the suspended step, answered once by the orchestrator, read by the resumed step. Each
function runs in the caller's transaction (or on its connection)."""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from threadline.events.chunk_types import ToolCallPayload
from threadline.store.db import Database


async def record_approval_requests(conn: asyncpg.Connection, run_id: str, step: int,
                                   calls: Sequence[ToolCallPayload]) -> None:
    """Record the calls step ``step`` holds for approval (worker, in the transaction that stores
    the step; a re-execution records the same ids again, which changes nothing)."""
    await conn.executemany(
        "INSERT INTO tool_approvals (run_id, tool_call_id, step, tool_name, args) VALUES ($1, $2, $3, $4, $5) "
        "ON CONFLICT DO NOTHING",
        [(run_id, c["toolCallId"], step, c["toolName"], c.get("args")) for c in calls])


async def answers(conn: asyncpg.Connection, run_id: str, call_ids: Sequence[str]) -> dict[str, tuple[str, str | None]]:
    """``(status, reason)`` of each recorded call among ``call_ids``, by call id."""
    rows = await conn.fetch("SELECT tool_call_id, status, reason FROM tool_approvals WHERE run_id = $1 "
                            "AND tool_call_id = ANY($2::text[])", run_id, list(call_ids))
    return {r["tool_call_id"]: (r["status"], r["reason"]) for r in rows}


async def held_call(conn: asyncpg.Connection, run_id: str, tool_call_id: str) -> asyncpg.Record | None:
    """The call's row, locked (``None``: the run never held such a call)."""
    row: asyncpg.Record | None = await conn.fetchrow(
        "SELECT * FROM tool_approvals WHERE run_id = $1 AND tool_call_id = $2 FOR UPDATE", run_id, tool_call_id)
    return row


async def answer(conn: asyncpg.Connection, run_id: str, tool_call_id: str, *, approved: bool,
                 reason: str | None) -> None:
    """Record the answer to a pending call (the row locked by :func:`held_call`)."""
    await conn.execute("UPDATE tool_approvals SET status = $3, reason = $4, resolved_at = now() "
                       "WHERE run_id = $1 AND tool_call_id = $2 AND status = 'pending'",
                       run_id, tool_call_id, "approved" if approved else "declined", None if approved else reason)


async def pending_calls(conn: asyncpg.Connection, resource_id: str, thread_id: str) -> list[asyncpg.Record]:
    """The calls the thread's runs hold for approval now (oldest first): what a person answers."""
    rows: list[asyncpg.Record] = await conn.fetch(
        "SELECT a.run_id, a.tool_call_id, a.step, a.tool_name, a.args, a.created_at FROM tool_approvals a "
        "JOIN runs r ON r.run_id = a.run_id WHERE r.resource_id = $1 AND r.thread_id = $2 "
        "AND r.status = 'running' AND a.status = 'pending' ORDER BY a.created_at, a.tool_call_id",
        resource_id, thread_id)
    return rows


async def run_position(conn: Database | asyncpg.Connection, run_id: str) -> tuple[str, str, int] | None:
    """``(resource_id, thread_id, next_seq)`` of run ``run_id`` (``next_seq``: the ``seq`` of the
    next chunk it writes), or ``None`` for no such run."""
    row = await conn.fetchrow("SELECT resource_id, thread_id, next_seq FROM runs WHERE run_id = $1", run_id)
    return None if row is None else (str(row["resource_id"]), str(row["thread_id"]), int(row["next_seq"]))
