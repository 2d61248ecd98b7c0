"""What a processor-worker reads and writes around one step (all writes fenced by the lease)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
import orjson

from threadline.errors import StaleWriterError
from threadline.events import StepResult
from threadline.events.codec import encode
from threadline.store import leases, outbox
from threadline.topics import Topics, thread_key

_STORABLE = ("input", "response")


async def has_pending(conn: asyncpg.Connection, run_id: str, exclude: list[str]) -> bool:
    return bool(await conn.fetchval(
        "SELECT 1 FROM signals WHERE run_id = $1 AND status = 'pending' AND NOT (id = ANY($2::text[])) LIMIT 1",
        run_id, exclude))


SEQ_BLOCK = 1_000_000
"""Chunk sequence numbers reserved per attempt: a crashed attempt's chunks stay below the next
attempt's, so ``seq`` never repeats or goes back within a run."""


_BEGIN = ("SELECT b.*, CASE WHEN b.outcome = 'claimed' AND b.step = 0 THEN coalesce("
          "(SELECT o.overrides FROM agent_overrides o WHERE o.agent_id = b.agent_id), '{}'::jsonb) END AS overrides "
          "FROM threadline_begin_step($1::text, $2::int, $3::bigint, $4::text, $5::float8, "
          "$6::timestamptz, $7::bigint, $8::int) b")


async def begin_step(conn: asyncpg.Connection, run_id: str, *, step: int, epoch: int, owner: str, lease_ttl_s: float,
                     takeover_from: object = None, history_limit: int = 200) -> asyncpg.Record:
    """Claim the run's current step and load what it reads, in one statement (one round trip,
    migration 0027's ``threadline_begin_step``).

    Returns a record with ``outcome``: ``claimed``, ``aborted`` (aborted while its step task was
    in flight), ``skipped`` (stale or duplicate task), ``stale`` (the run no longer holds the
    thread, or the step is no longer this worker's) or ``busy`` (another worker owns the step
    and may be alive; ``heartbeat`` is the value seen). The run's columns (``resource_id``,
    ``thread_id``, ``agent_id``, ``epoch``, ``step``, ``next_seq``, ``options``, ``state``)
    are set unless skipped; when claimed also ``attempt``, ``seq_base`` (its chunks start there;
    :data:`SEQ_BLOCK` numbers are reserved per attempt), ``restarted`` (an earlier attempt of
    the step started and never finished), ``history`` + ``history_at`` (step 0: the thread's
    stored messages, oldest first, at most ``history_limit``, not this run's), ``signals``
    (``[{id, payload}]`` now drained by this step; step 0: not the deliveries) and ``recorded``
    (the model output a crashed attempt recorded), and ``overrides`` (step 0 claimed: the agent's
    stored editor overrides, ``{}`` when none are stored, decision 95; else ``None``).

    An earlier attempt owned by another worker is taken over only when its heartbeat is unset
    (handed back) or still equals ``takeover_from`` (the caller watched it stand still).
    """
    row = await conn.fetchrow(_BEGIN, run_id, step, epoch, owner, lease_ttl_s, takeover_from, SEQ_BLOCK,
                              history_limit)
    assert row is not None  # a function call returns one row
    return row


def history_of(row: asyncpg.Record) -> list[dict[str, Any]]:
    """The messages of :func:`begin_step`'s ``history`` in the shape the step loop reads."""
    out = []
    for m, at in zip(row["history"] or [], row["history_at"] or [], strict=True):
        msg = {"id": m["id"], "role": m["role"], "content": m["content"], "createdAt": at.isoformat(),
               "threadId": m["thread_id"], "resourceId": m["resource_id"]}
        if m["type"]:
            msg["type"] = m["type"]
        out.append(msg)
    return out


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


STALE_SQLSTATE = "TLSTW"
"""What the fenced step functions raise when the writer is fenced out."""

_SAVE = ("SELECT box, claimed, next_signals, announced FROM threadline_save_step($1::text, $2::bigint, $3::int, "
         "$4::int, $5::float8, $6::jsonb, $7::text[], $8::jsonb, $9::bigint, $10::jsonb, $11::text, $12::text, "
         "$13::jsonb, $14::bytea, $15::jsonb, $16::jsonb, $17::bytea[])")


@dataclass(frozen=True, slots=True)
class Announcement:
    """The lifecycle records the save queues in place of the step result when the worker's plan
    announces the stored step (:class:`~threadline.orchestration.runs.AnnounceStored`) and the
    row is as the plan assumed (migration 0027, decisions 103 and 106).

    ``records``: ``(value, headers)`` of each lifecycle event, in order: the run's start (its first
    ``start_rows``, queued only while the start is unannounced), then ``step_finished``.
    ``applied``: the ``results_applied`` the plan assumes. ``own``: outbox ids of the run's
    lifecycle rows this worker queued and may not have seen marked published yet (any other
    unpublished lifecycle row of the thread leaves the announcement to the orchestrator)."""

    topic: str
    records: list[tuple[bytes, list[tuple[str, bytes]]]]
    start_rows: int
    applied: int
    own: list[int]


@dataclass(frozen=True, slots=True)
class Saved:
    """What :func:`save_step` wrote."""

    box: int | None
    """The step result's outbox id; ``None`` when the step was announced instead."""
    value: bytes
    """The step result as encoded (to publish without reading it back)."""
    headers: list[tuple[str, bytes]]
    """Its Kafka headers."""
    claimed: bool
    """The run's next step was claimed for the caller."""
    signals: list[dict[str, Any]]
    """``[{id, payload}]``: the signals the claimed step drained (``[]`` when none or not claimed)."""
    announced: list[int]
    """The outbox ids of the lifecycle records queued (``[]`` when not announced)."""


async def save_step(conn: asyncpg.Connection, *, topics: Topics, run: Mapping[str, Any],
                    entries: Sequence[tuple[Mapping[str, Any], str]], consumed: list[str] | None,
                    state: dict[str, Any] | orjson.Fragment, next_seq: int, result: StepResult,
                    final_fields: dict[str, Any] | None, lease_ttl_s: float, claim_for: str | None = None,
                    announce: Announcement | None = None) -> Saved:
    """Write the step's effects and apply the worker's plan in one statement (one round trip,
    migration 0027's ``threadline_save_step``), fenced by the lease epoch and the attempt
    (``result.attempt``).

    Stores the run's ``input``/``response`` messages as they are in the list (memory messages
    are never written back, C09), deletes this run's rows no longer in the list, marks the
    ``consumed`` signals (``None``: every signal still pending for the run), saves the run's
    working state (and ``final_fields`` when the run ends), renews the lease by ``lease_ttl_s``
    seconds and queues the step result in the outbox. ``claim_for``: the run's next step is
    claimed for that step owner as :func:`begin_step` claims it (step + 1, attempt 1; so it is
    fenced, beaten and taken over like any step, docs/decisions.md 31), while the run is running
    at ``run``'s epoch and step. ``announce`` (with ``claim_for``): the stored step is announced
    in place of its result while the row is as the announcement assumes.

    Raises:
        StaleWriterError: the run no longer holds the thread, or a later attempt took over;
            nothing is written then.
    """
    run_id, thread_id = run["run_id"], run["thread_id"]
    value, headers = encode(result)
    claim = None if claim_for is None else {"owner": claim_for, "seq_block": SEQ_BLOCK}
    plan = life = None
    if announce is not None:
        plan = {"applied": announce.applied, "topic": announce.topic, "start_rows": announce.start_rows,
                "headers": [outbox.stored_headers(h) for _, h in announce.records], "own": announce.own}
        life = [v for v, _ in announce.records]
    try:
        row = await conn.fetchrow(
            _SAVE, run_id, run["epoch"], run["step"], result.attempt, lease_ttl_s, _message_rows(entries), consumed,
            state, next_seq, final_fields, topics.step_results, thread_key(run["resource_id"], thread_id),
            outbox.stored_headers(headers), value, claim, plan, life)
    except asyncpg.PostgresError as exc:
        if getattr(exc, "sqlstate", None) == STALE_SQLSTATE:
            raise StaleWriterError(run_id, run["epoch"]) from exc
        raise
    assert row is not None  # a function call returns one row
    return Saved(box=row["box"], value=value, headers=headers, claimed=bool(row["claimed"]),
                 signals=list(row["next_signals"] or []), announced=list(row["announced"] or []))


def _message_rows(entries: Sequence[tuple[Mapping[str, Any], str]]) -> list[dict[str, Any]]:
    """The ``p_messages`` of ``threadline_save_step``: the run's ``input``/``response`` messages."""
    rows: dict[str, dict[str, Any]] = {}  # a repeated id: first place, last content (as row-by-row upserts)
    for msg, source in entries:
        if source not in _STORABLE or msg["role"] == "system":
            continue
        content = _strip_incomplete(msg["content"])
        if msg["role"] == "assistant" and not content["parts"]:
            continue
        rows[msg["id"]] = {"id": msg["id"], "role": msg["role"], "type": msg.get("type"), "content": content}
    return list(rows.values())


_RECORD = ("SELECT * FROM threadline_record_output($1::text, $2::bigint, $3::int, $4::int, $5::text, "
           "$6::float8, $7::jsonb, $8::text[])")


async def record_model_output(conn: asyncpg.Connection, run: Mapping[str, Any], attempt: int, owner: str,
                              output: dict[str, Any], call_ids: Sequence[str],
                              lease_ttl_s: float) -> dict[str, tuple[Any, str | None]]:
    """Record the model's completed output of ``attempt`` of the run's current step (before its
    tools run), confirm that ``owner`` still executes that attempt (its heartbeat refreshed) and
    read which of ``call_ids`` already ran: one statement (migration 0025's
    ``threadline_record_output``, decision 88), renewing the lease by ``lease_ttl_s`` seconds.

    ``output``: ``{"chunks": [{type, payload}, ...], "usage": {...} | None, "finish_reason": str}``.
    Returns ``{tool_call_id: (result, error)}`` of the calls among ``call_ids`` that ran.

    Raises:
        StaleWriterError: the run no longer holds the thread, or another attempt or worker owns
            the step (nothing is written then).
    """
    try:
        rows = await conn.fetch(_RECORD, run["run_id"], run["epoch"], run["step"], attempt, owner, lease_ttl_s,
                                output, list(call_ids))
    except asyncpg.PostgresError as exc:
        if getattr(exc, "sqlstate", None) == STALE_SQLSTATE:
            raise StaleWriterError(run["run_id"], run["epoch"]) from exc
        raise
    return {r["call_id"]: (r["call_result"], r["call_error"]) for r in rows}


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


async def save_tool_result(conn: asyncpg.Connection, run_id: str, call_id: str, tool_name: str, result: object,
                           error: str | None) -> None:
    """Record what a tool call returned (the first record wins)."""
    await conn.execute("INSERT INTO tool_calls (run_id, tool_call_id, tool_name, result, error) "
                       "VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING", run_id, call_id, tool_name, result, error)
