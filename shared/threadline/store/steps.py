"""What a processor-worker reads and writes around one step (all writes fenced by the lease)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import asyncpg

from threadline.errors import StaleWriterError
from threadline.events import StepResult
from threadline.store import leases, outbox
from threadline.topics import Topics, thread_key

_STORABLE = ("input", "response")


async def load_history(conn: asyncpg.Connection, thread_id: str, run_id: str, limit: int = 200) -> list[dict[str, Any]]:
    """The thread's stored messages (oldest first, at most ``limit``), excluding this run's."""
    rows = await conn.fetch(
        "SELECT id, role, type, content, created_at, thread_id, resource_id FROM ("
        "  SELECT * FROM messages WHERE thread_id = $1 AND (run_id IS NULL OR run_id <> $2) "
        "  ORDER BY position DESC LIMIT $3) m ORDER BY position", thread_id, run_id, limit)
    out = []
    for r in rows:
        msg = {"id": r["id"], "role": r["role"], "content": r["content"],
               "createdAt": r["created_at"].isoformat(), "threadId": r["thread_id"],
               "resourceId": r["resource_id"]}
        if r["type"]:
            msg["type"] = r["type"]
        out.append(msg)
    return out


async def pending_signals(conn: asyncpg.Connection, run_id: str) -> list[asyncpg.Record]:
    """Signals addressed to ``run_id`` and not yet consumed, in arrival order."""
    return await conn.fetch("SELECT id, payload, mode FROM signals WHERE run_id = $1 AND status = 'pending' "
                            "ORDER BY seq", run_id)


async def mark_drained(conn: asyncpg.Connection, ids: list[str], step: int) -> None:
    """Record that ``step`` drained these signals (they become consumed when the step is stored;
    an abort in between consumes them too instead of handing them to a follow-up run)."""
    if ids:
        await conn.execute("UPDATE signals SET drained_step = $2 WHERE id = ANY($1::text[]) AND drained_step IS NULL",
                           ids, step)


async def has_pending(conn: asyncpg.Connection, run_id: str, exclude: list[str]) -> bool:
    return bool(await conn.fetchval(
        "SELECT 1 FROM signals WHERE run_id = $1 AND status = 'pending' AND NOT (id = ANY($2::text[])) LIMIT 1",
        run_id, exclude))


SEQ_BLOCK = 1_000_000
"""Chunk sequence numbers reserved per attempt: a crashed attempt's chunks stay below the next
attempt's, so ``seq`` never repeats or goes back within a run."""


class StepBusyError(Exception):
    """Another live worker executes this step (its heartbeat moves); ``heartbeat`` is the value seen."""

    def __init__(self, heartbeat: Any) -> None:
        super().__init__(f"step executed elsewhere (heartbeat {heartbeat})")
        self.heartbeat = heartbeat


async def begin_attempt(conn: asyncpg.Connection, run: asyncpg.Record, lease_ttl_s: float, *,
                        owner: str = "", takeover_from: Any = None) -> asyncpg.Record | None:
    """Start executing the run's current step, fenced by the lease.

    Returns ``(attempt, seq_base, restarted)``: ``restarted`` when an earlier attempt of this step
    started and never finished (its worker died or was fenced off): this one gets the next
    attempt number, and its chunks start after the dead attempt's reserved block. ``None`` when
    the step is no longer this worker's to run.

    An earlier attempt owned by another worker is taken over only when its heartbeat is unset
    (handed back) or still equals ``takeover_from`` (the caller watched it stand still).

    Raises:
        StepBusyError: another worker owns the step and may be alive.
        StaleWriterError: the run no longer holds the thread.
    """
    await leases.check(conn, run["thread_id"], run["run_id"], run["epoch"], renew_s=lease_ttl_s)
    old = await conn.fetchrow("SELECT step_started, step_owner, step_heartbeat FROM runs WHERE run_id = $1 "
                              "FOR UPDATE", run["run_id"])
    if old is not None and old["step_started"] and old["step_owner"] not in (None, owner) \
            and old["step_heartbeat"] is not None and old["step_heartbeat"] != takeover_from:
        raise StepBusyError(old["step_heartbeat"])
    return await conn.fetchrow(
        "UPDATE runs r SET attempt = CASE WHEN r.step_started THEN r.attempt + 1 ELSE r.attempt END, "
        "  step_started = true, next_seq = r.next_seq + $4, step_owner = $5, step_heartbeat = now(), "
        "  updated_at = now() "
        "WHERE r.run_id = $1 AND r.epoch = $2 AND r.step = $3 AND r.steps_done = $3 AND r.status = 'running' "
        "RETURNING r.attempt, r.next_seq - $4 AS seq_base, $6::boolean AS restarted",
        run["run_id"], run["epoch"], run["step"], SEQ_BLOCK, owner, bool(old and old["step_started"]))


_FENCE = ("status = 'running' AND EXISTS (SELECT 1 FROM thread_leases l WHERE l.thread_id = runs.thread_id "
          "AND l.run_id = runs.run_id AND l.epoch = runs.epoch)")


async def heartbeat(conn: asyncpg.Connection, run_id: str, owner: str, attempt: int) -> bool:
    """Refresh the step's heartbeat (fenced by the lease epoch); False when another worker took
    the step over or the run no longer holds the thread."""
    return await conn.fetchval(f"UPDATE runs SET step_heartbeat = now() WHERE run_id = $1 AND step_owner = $2 "
                               f"AND attempt = $3 AND {_FENCE} RETURNING true", run_id, owner, attempt) is not None


async def hand_back(conn: asyncpg.Connection, run_id: str, owner: str) -> None:
    """Shutdown mid-step: let the next worker re-execute the step at once."""
    await conn.execute(f"UPDATE runs SET step_heartbeat = NULL WHERE run_id = $1 AND step_owner = $2 AND {_FENCE}",
                       run_id, owner)


def _strip_incomplete(content: dict[str, Any]) -> dict[str, Any]:
    parts = [p for p in content.get("parts") or []
             if not (p.get("type") == "tool-invocation"
                     and p["toolInvocation"].get("state") in ("call", "partial-call"))]
    return {**content, "parts": parts}


async def persist_step(conn: asyncpg.Connection, *, topics: Topics, run: asyncpg.Record,
                       entries: Sequence[tuple[Mapping[str, Any], str]], consumed: list[str],
                       state: dict[str, Any], next_seq: int, result: StepResult,
                       final_fields: dict[str, Any] | None, lease_ttl_s: float) -> int:
    """Write the step's effects in the caller's transaction, fenced by the lease epoch.

    Stores the run's ``input``/``response`` messages as they are in the list (memory messages
    are never written back, C09), deletes this run's rows no longer in the list, marks consumed
    signals, saves the run's working state, and queues the step result in the outbox.

    Raises:
        StaleWriterError: the run no longer holds the thread.
    Returns:
        The outbox id of the step result.
    """
    run_id, thread_id = run["run_id"], run["thread_id"]
    await leases.check(conn, thread_id, run_id, run["epoch"], renew_s=lease_ttl_s)
    current = await conn.fetchval("SELECT attempt FROM runs WHERE run_id = $1 FOR UPDATE", run_id)
    if current != result.attempt:  # a later attempt of this step took over: this one is dead
        raise StaleWriterError(run_id, run["epoch"])
    rows = []
    for msg, source in entries:
        if source not in _STORABLE or msg["role"] == "system":
            continue
        content = _strip_incomplete(msg["content"])
        if msg["role"] == "assistant" and not content["parts"]:
            continue
        rows.append((msg["id"], thread_id, run["resource_id"], run_id, msg["role"], msg.get("type"), content))
    if rows:
        await conn.executemany(
            "INSERT INTO messages (id, thread_id, resource_id, run_id, role, type, content) "
            "VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO UPDATE SET content = EXCLUDED.content, "
            "role = EXCLUDED.role, updated_at = now() WHERE messages.run_id = EXCLUDED.run_id "
            "AND messages.content IS DISTINCT FROM EXCLUDED.content", rows)
    keep = [r[0] for r in rows]
    await conn.execute("DELETE FROM messages WHERE run_id = $1 AND NOT (id = ANY($2::text[]))", run_id, keep)
    if consumed:
        await conn.execute("UPDATE signals SET status = 'consumed', consumed_by_run = $2, consumed_at = now() "
                           "WHERE id = ANY($1::text[]) AND status = 'pending'", consumed, run_id)
    fields = final_fields or {}
    await conn.execute(
        "UPDATE runs SET state = $2, next_seq = $3, steps_done = $4, updated_at = now(), "
        "status = coalesce($5, status), finish_reason = coalesce($6, finish_reason), "
        "text = coalesce($7, text), usage = coalesce($8, usage), error = coalesce($9, error), "
        "tripwire = coalesce($10, tripwire), tripwire_processor_id = coalesce($11, tripwire_processor_id), "
        "finished_at = CASE WHEN $5 IS NULL THEN finished_at ELSE now() END "
        "WHERE run_id = $1 AND epoch = $12",
        run_id, state, next_seq, run["step"] + 1, fields.get("status"), fields.get("finish_reason"),
        fields.get("text"), fields.get("usage"), fields.get("error"), fields.get("tripwire"),
        (fields.get("tripwire") or {}).get("processorId"), run["epoch"])
    return await outbox.add(conn, topics.step_results, result,
                            key=thread_key(run["resource_id"], thread_id))


async def record_model_output(conn: asyncpg.Connection, run: asyncpg.Record, attempt: int,
                              output: dict[str, Any], lease_ttl_s: float) -> None:
    """Record the model's completed output of ``attempt`` of the run's current step (before its
    tools run), fenced by the lease epoch and the attempt number.

    ``output``: ``{"chunks": [{type, payload}, ...], "usage": {...} | None, "finish_reason": str}``.

    Raises:
        StaleWriterError: the run no longer holds the thread, or a later attempt took over.
    """
    await leases.check(conn, run["thread_id"], run["run_id"], run["epoch"], renew_s=lease_ttl_s)
    current = await conn.fetchval("SELECT attempt FROM runs WHERE run_id = $1 FOR UPDATE", run["run_id"])
    if current != attempt:
        raise StaleWriterError(run["run_id"], run["epoch"])
    await conn.execute(
        "INSERT INTO model_outputs (run_id, step, attempt, output) VALUES ($1, $2, $3, $4) "
        "ON CONFLICT (run_id, step) DO UPDATE SET attempt = EXCLUDED.attempt, output = EXCLUDED.output, "
        "created_at = now()", run["run_id"], run["step"], attempt, output)


async def recorded_model_output(conn: asyncpg.Connection, run_id: str, step: int) -> dict[str, Any] | None:
    """The model output an earlier (crashed) attempt of this step recorded, if any."""
    return await conn.fetchval("SELECT output FROM model_outputs WHERE run_id = $1 AND step = $2", run_id, step)


async def forget_model_output(conn: asyncpg.Connection, run_id: str, step: int) -> None:
    """A processor retry asks the model again: the recorded output no longer applies."""
    await conn.execute("DELETE FROM model_outputs WHERE run_id = $1 AND step = $2", run_id, step)


_BEAT = """
UPDATE runs SET step_heartbeat = now()
FROM unnest($1::text[], $2::int[]) AS u(run_id, attempt)
WHERE runs.run_id = u.run_id AND runs.step_owner = $3 AND runs.attempt = u.attempt
  AND runs.status = 'running'
  AND EXISTS (SELECT 1 FROM thread_leases l WHERE l.thread_id = runs.thread_id
              AND l.run_id = runs.run_id AND l.epoch = runs.epoch)
RETURNING runs.run_id
"""

_RENEW = """
UPDATE thread_leases l SET expires_at = now() + make_interval(secs => $4), updated_at = now()
FROM unnest($1::text[], $2::text[], $3::bigint[]) AS u(thread_id, run_id, epoch)
WHERE l.thread_id = u.thread_id AND l.run_id = u.run_id AND l.epoch = u.epoch
RETURNING l.run_id
"""


async def beat_all(conn: asyncpg.Connection, run_ids: list[str], attempts: list[int], owner: str) -> set[str]:
    """One heartbeat for many steps of ``owner`` (``attempts[i]`` of ``run_ids[i]``), fenced by the
    lease epoch; returns the runs whose heartbeat moved (the others were taken over or lost the
    thread)."""
    return {r["run_id"] for r in await conn.fetch(_BEAT, run_ids, attempts, owner)}


async def renew_all(conn: asyncpg.Connection, thread_ids: list[str], run_ids: list[str], epochs: list[int],
                    ttl_s: float) -> set[str]:
    """Renew many thread leases by ``ttl_s`` seconds (each still held by its run at its epoch);
    returns the runs whose lease was renewed."""
    return {r["run_id"] for r in await conn.fetch(_RENEW, thread_ids, run_ids, epochs, ttl_s)}


async def aborted_among(conn: asyncpg.Connection, run_ids: list[str]) -> list[str]:
    """The runs of ``run_ids`` that are aborted."""
    rows = await conn.fetch("SELECT run_id FROM runs WHERE run_id = ANY($1::text[]) AND status = 'aborted'",
                            run_ids)
    return [r["run_id"] for r in rows]


async def restart_attempt(conn: asyncpg.Connection, run_id: str, thread_id: str, epoch: int, step: int, *,
                          attempt: int, retry_count: int) -> None:
    """A processor retry: the step continues as ``attempt`` (the previous one is dead), with
    ``retry_count`` in the run's state and the recorded model output forgotten (the model is
    asked again). In the caller's transaction.

    Raises:
        StaleWriterError: the run no longer holds the thread, or ``attempt - 1`` is no longer current.
    """
    await leases.check(conn, thread_id, run_id, epoch)
    await forget_model_output(conn, run_id, step)
    status = await conn.execute(
        "UPDATE runs SET attempt = $2, state = jsonb_set(state, '{retry_count}', to_jsonb($3::int)), "
        "updated_at = now() WHERE run_id = $1 AND attempt = $2 - 1", run_id, attempt, retry_count)
    if not status.endswith(" 1"):
        raise StaleWriterError(run_id, epoch)


async def tool_results(conn: asyncpg.Connection, run_id: str,
                       call_ids: list[str]) -> dict[str, tuple[Any, str | None]]:
    """``(result, error)`` of the run's tool calls among ``call_ids`` that already ran, by call id."""
    rows = await conn.fetch(
        "SELECT tool_call_id, result, error FROM tool_calls WHERE run_id = $1 AND tool_call_id = ANY($2::text[])",
        run_id, call_ids)
    return {r["tool_call_id"]: (r["result"], r["error"]) for r in rows}


async def save_tool_result(conn: asyncpg.Connection, run_id: str, call_id: str, tool_name: str, result: Any,
                           error: str | None) -> None:
    """Record what a tool call returned (the first record wins)."""
    await conn.execute("INSERT INTO tool_calls (run_id, tool_call_id, tool_name, result, error) "
                       "VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING", run_id, call_id, tool_name, result, error)
