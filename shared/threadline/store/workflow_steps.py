"""The ``workflow_steps`` table (migration 0024; decisions 80–83): one row per workflow step of
a tool call, written before the next step starts, each write fenced by the step's ownership (the
worker's owner token, the attempt, the thread lease) so a worker that lost the step records
nothing. The worker's journal over it is :class:`threadline.worker.journal.PgJournal`."""

from __future__ import annotations

from typing import Any

import asyncpg

from threadline.store.steps import _FENCE  # the one definition of a fenced step write

_OWNED = (f"EXISTS (SELECT 1 FROM runs WHERE runs.run_id = $1 AND runs.step_owner = $4 AND runs.attempt = $5 "
          f"AND {_FENCE})")

_START = ("INSERT INTO workflow_steps (run_id, tool_call_id, path, status, attempt, runs) "
          f"SELECT $1, $2, $3, 'running', $5, 1 WHERE {_OWNED} "
          "ON CONFLICT (run_id, tool_call_id, path) DO UPDATE SET status = 'running', attempt = EXCLUDED.attempt, "
          "runs = workflow_steps.runs + 1, updated_at = now() WHERE workflow_steps.status = 'running' "
          "RETURNING true")

_END = ("INSERT INTO workflow_steps (run_id, tool_call_id, path, status, attempt, runs, output, error) "
        f"SELECT $1, $2, $3, $6, $5, 0, $7, $8 WHERE {_OWNED} "
        "ON CONFLICT (run_id, tool_call_id, path) DO UPDATE SET status = EXCLUDED.status, output = EXCLUDED.output, "
        "error = EXCLUDED.error, attempt = EXCLUDED.attempt, updated_at = now() "
        "WHERE workflow_steps.status = 'running' RETURNING true")


async def load_steps(conn: asyncpg.Connection, run_id: str, tool_call_id: str) -> dict[str, tuple[str, Any, str | None]]:
    """The recorded steps of a workflow's tool call: ``{path: (status, output, error)}``, ``status``
    ``running`` / ``success`` / ``failed``."""
    rows = await conn.fetch("SELECT path, status, output, error FROM workflow_steps "
                            "WHERE run_id = $1 AND tool_call_id = $2", run_id, tool_call_id)
    return {r["path"]: (r["status"], r["output"], r["error"]) for r in rows}


async def start_step(conn: asyncpg.Connection, run_id: str, tool_call_id: str, path: str, *, owner: str,
                     attempt: int) -> bool:
    """Record ``path`` as running under ``attempt`` (a new row, or a ``running`` one a crashed
    attempt left); False when the step is not owned (or the path already ended)."""
    return await conn.fetchval(_START, run_id, tool_call_id, path, owner, attempt) is not None


async def end_step(conn: asyncpg.Connection, run_id: str, tool_call_id: str, path: str, *, owner: str,
                   attempt: int, status: str, output: object, error: str | None) -> bool:
    """Record ``path``'s end; False when the step is not owned (or the path already ended)."""
    return await conn.fetchval(_END, run_id, tool_call_id, path, owner, attempt, status, output,
                               error) is not None
