"""The ``run_scores`` table (migration 0022, decision 71): scorer jobs of finished runs and their
results, stored once per (run, scorer)."""

from __future__ import annotations

from typing import Any

import asyncpg
import orjson

from threadline.events import LifecycleEvent
from threadline.events.messages import is_user_authored
from threadline.events.rows import ScoreRow
from threadline.store import outbox
from threadline.topics import Topics, thread_key


async def run_for_scoring(conn: asyncpg.Connection, run_id: str) -> dict[str, Any] | None:
    """A finished run as scorers see it: ``{run_id, agent_id, resource_id, thread_id, status,
    output, input, request_context}`` (``input``: the run's input messages), or ``None``."""
    row = await conn.fetchrow(
        "SELECT run_id, agent_id, resource_id, thread_id, status, text, options::text AS options, "
        "(state -> 'message_list' -> 'entries')::text AS entries FROM runs WHERE run_id = $1", run_id)
    if row is None:
        return None
    entries = orjson.loads(row["entries"]) if row["entries"] else []
    options = orjson.loads(row["options"]) if row["options"] else {}
    return {"run_id": row["run_id"], "agent_id": row["agent_id"], "resource_id": row["resource_id"],
            "thread_id": row["thread_id"], "status": row["status"], "output": row["text"] or "",
            "input": [m for m, source in entries if source == "input" and is_user_authored(m)],
            "request_context": dict(options.get("request_context") or {})}


async def enqueue(conn: asyncpg.Connection, run: dict[str, Any], scorers: list[str]) -> int:
    """Insert a pending job per scorer of ``run`` (already there: left as it is). Returns how
    many were new."""
    if not scorers:
        return 0
    status = await conn.execute(
        "INSERT INTO run_scores (run_id, scorer, agent_id, resource_id, thread_id) "
        "SELECT $1, s, $2, $3, $4 FROM unnest($5::text[]) AS s ON CONFLICT (run_id, scorer) DO NOTHING",
        run["run_id"], run["agent_id"], run["resource_id"], run["thread_id"], scorers)
    return int(status.split()[-1])


async def claim(conn: asyncpg.Connection, *, claim_s: float, limit: int) -> list[asyncpg.Record]:
    """Claim up to ``limit`` pending jobs whose claim expired (or none was made) for ``claim_s``
    seconds; another instance skips them meanwhile. Returns ``(run_id, scorer, attempts)`` rows."""
    rows: list[asyncpg.Record] = await conn.fetch(
        "UPDATE run_scores s SET claimed_until = now() + make_interval(secs => $1), attempts = s.attempts + 1 "
        "FROM (SELECT run_id, scorer FROM run_scores WHERE status = 'pending' "
        "      AND (claimed_until IS NULL OR claimed_until < now()) ORDER BY created_at LIMIT $2 "
        "      FOR UPDATE SKIP LOCKED) AS c "
        "WHERE s.run_id = c.run_id AND s.scorer = c.scorer RETURNING s.run_id, s.scorer, s.attempts",
        claim_s, limit)
    return rows


async def store(conn: asyncpg.Connection, topics: Topics, *, run: dict[str, Any], scorer: str,
                score: float | None, reason: str | None, error: dict[str, Any] | None) -> int | None:
    """Store a job's result once and queue its ``score`` lifecycle event in the same transaction.
    Returns the outbox id, or ``None`` when the job was already stored (nothing written)."""
    async with conn.transaction():
        done = await conn.fetchval(
            "UPDATE run_scores SET status = $3, score = $4, reason = $5, error = $6::text::jsonb, scored_at = now(), "
            "claimed_until = NULL WHERE run_id = $1 AND scorer = $2 AND status = 'pending' RETURNING true",
            run["run_id"], scorer, "failed" if error else "done", score, reason,
            orjson.dumps(error).decode() if error else None)
        if not done:
            return None
        event = LifecycleEvent(type="score", resource_id=run["resource_id"], thread_id=run["thread_id"],
                               run_id=run["run_id"], agent_id=run["agent_id"], error=error,
                               score={"scorer": scorer, "score": score, "reason": reason})
        return await outbox.add(conn, topics.lifecycle, event, key=thread_key(run["resource_id"], run["thread_id"]))


async def list_scores(conn: asyncpg.Connection, run_id: str) -> list[ScoreRow]:
    """The run's stored scores, by scorer name: ``[{run_id, scorer, status, score, reason, error,
    scored_at}]`` (``status`` ``done`` or ``failed``; pending jobs are not listed)."""
    rows = await conn.fetch(
        "SELECT run_id, scorer, agent_id, status, score, reason, error::text AS error, scored_at FROM run_scores "
        "WHERE run_id = $1 AND status <> 'pending' ORDER BY scorer", run_id)
    return [{"run_id": r["run_id"], "scorer": r["scorer"], "agent_id": r["agent_id"], "status": r["status"],
             "score": r["score"], "reason": r["reason"],
             "error": orjson.loads(r["error"]) if r["error"] else None,
             "scored_at": r["scored_at"].isoformat() if r["scored_at"] else None} for r in rows]
