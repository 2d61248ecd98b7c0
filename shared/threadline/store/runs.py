"""Runs and the signals addressed to them: the rows ingress and the orchestrator create, and the
orchestrator's reads and writes of a run's row (:mod:`threadline.flows.orchestration`) and of the
signals it hands on."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import asyncpg

from threadline.events.json_types import JSONObject
from threadline.events.signals import signal_to_message
from threadline.store.db import Database

RUN_ROW_COLUMNS = ("run_id, thread_id, resource_id, agent_id, kind, request_id, reply_to, status, epoch, step, attempt, "
                   "steps_done, options, next_seq, finish_reason, text, usage, error, tripwire, tripwire_processor_id, "
                   "created_at, updated_at, finished_at, terminal_emitted, step_started, step_owner, step_heartbeat, "
                   "continued_from, results_applied, start_announced, parent_run_id, parent_tool_call_id, "
                   "waiting_children")
"""Every ``runs`` column but ``state``: the run's row as the orchestrator locks it (decision 105).
The state (the whole message list, history included) is read only for a ``generate`` reply's
steps (:func:`run_steps`)."""

RUN_VIEW_COLUMNS = ("run_id, resource_id, thread_id, agent_id, status, epoch, step, steps_done, attempt, kind, "
                    "request_id, reply_to, continued_from, results_applied, start_announced")
"""The ``runs`` columns :meth:`~threadline.orchestration.runs.RunRow.of` and a lifecycle event read: not
``state`` (the run's whole message list, tens of KB on a long thread, which PostgreSQL would
decompress and send and the orchestrator decode on every continued step) nor ``options``."""

RUN_COLUMNS = "run_id, thread_id, resource_id, agent_id, kind, request_id, reply_to, epoch, options, start_announced"
"""The columns a new run is inserted with, in the order :func:`create_run` and a wake's one statement
(:mod:`threadline.store.wake`) give their values."""

SIGNAL_COLUMNS = "id, thread_id, resource_id, agent_id, type, mode, status, run_id, request_id, payload, options"
"""The columns a new signal is inserted with, in the order :func:`insert_signal` and a wake's one
statement give their values."""


async def create_run(conn: asyncpg.Connection, *, run_id: str, agent_id: str, resource_id: str,
                     thread_id: str, epoch: int, options: Mapping[str, object], kind: str,
                     request_id: str | None, reply_to: str | None, start_announced: bool = True) -> None:
    """Insert a ``running`` run row holding lease ``epoch``; ``start_announced=False`` for a run
    whose step 0 the caller schedules itself (the orchestrator announces its start later)."""
    await conn.execute(
        f"INSERT INTO runs ({RUN_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        run_id, thread_id, resource_id, agent_id, kind, request_id, reply_to, epoch, dict(options),
        start_announced)


async def insert_signal(conn: asyncpg.Connection, signal: Mapping[str, object], *, thread_id: str, resource_id: str,
                        agent_id: str, request_id: str, mode: str, status: str, run_id: str | None,
                        options: Mapping[str, object]) -> None:
    """Store ``signal`` (its payload) for the thread: ``mode`` is how it was routed (``wake``,
    ``deliver``, ``queue``, ``persist``, ``discard``), ``status`` ``pending`` / ``persisted`` /
    ``discarded``, ``options`` the run options plus ``reply_to`` and ``kind`` of its request."""
    await conn.execute(
        f"INSERT INTO signals ({SIGNAL_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
        signal["id"], thread_id, resource_id, agent_id, signal["type"], mode, status, run_id,
        request_id, signal, dict(options))


async def insert_signal_message(conn: asyncpg.Connection, signal: dict[str, Any], *, thread_id: str,
                                resource_id: str, run_id: str | None = None) -> None:
    """Store the transcript message of ``signal`` in the thread (once: its id is the signal's)."""
    msg = signal_to_message(signal, thread_id=thread_id, resource_id=resource_id)
    if run_id is None:
        await conn.execute(
            "INSERT INTO messages (id, thread_id, resource_id, role, type, content) "
            "VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO NOTHING",
            msg["id"], thread_id, resource_id, msg["role"], msg.get("type"), msg["content"])
        return
    await conn.execute(
        "INSERT INTO messages (id, thread_id, resource_id, run_id, role, type, content) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO NOTHING",
        msg["id"], thread_id, resource_id, run_id, msg["role"], msg.get("type"), msg["content"])


async def store_run_input(conn: asyncpg.Connection, run_id: str, *, thread_id: str, resource_id: str) -> None:
    """Store now the transcript messages of the run's own input not stored yet (its pending
    ``wake``/``queue`` signals, in arrival order), as the run's messages: a message persisted
    while the run streams then follows the input it came after (decision 185). The run's step
    save keeps these rows' positions (it updates their content, or deletes what it does not keep)."""
    for row in await conn.fetch(
            "SELECT payload FROM signals WHERE run_id = $1 AND status = 'pending' AND mode IN ('wake', 'queue') "
            "ORDER BY seq", run_id):
        await insert_signal_message(conn, row["payload"], thread_id=thread_id, resource_id=resource_id,
                                    run_id=run_id)


async def run_status(conn: Database | asyncpg.Connection, run_id: str) -> str | None:
    """The run's ``status`` (``running``, ``finished``, ``failed``, ``aborted`` or ``tripwire``), or
    ``None`` when there is no such run."""
    row = await conn.fetchrow("SELECT status FROM runs WHERE run_id = $1", run_id)
    return None if row is None else str(row["status"])


# --- the orchestrator's reads and writes of a run's row ------------------------------------------
async def lock_run(conn: asyncpg.Connection, run_id: str) -> asyncpg.Record | None:
    """The run's row (:data:`RUN_ROW_COLUMNS`) locked ``FOR UPDATE`` for the caller's transaction
    (after its thread's lease row: :mod:`threadline.store.leases`), or ``None`` when there is no such run."""
    return await conn.fetchrow(f"SELECT {RUN_ROW_COLUMNS} FROM runs WHERE run_id = $1 FOR UPDATE", run_id)


async def read_run(conn: asyncpg.Connection, run_id: str) -> asyncpg.Record | None:
    """The run's row as :data:`RUN_VIEW_COLUMNS`, read without a lock, or ``None``."""
    return await conn.fetchrow(f"SELECT {RUN_VIEW_COLUMNS} FROM runs WHERE run_id = $1", run_id)


async def run_holder(conn: asyncpg.Connection, run_id: str | None) -> asyncpg.Record | None:
    """``agent_id`` and ``status`` of the run holding a thread's lease, or ``None``."""
    return await conn.fetchrow("SELECT agent_id, status FROM runs WHERE run_id = $1", run_id)


async def run_steps(conn: asyncpg.Connection, run_id: str) -> list[JSONObject]:
    """The run's ``state.steps`` (a ``generate`` reply's steps; ``[]`` when none)."""
    steps = await conn.fetchval("SELECT state->'steps' FROM runs WHERE run_id = $1", run_id)
    return list(steps or [])


async def mark_start_announced(conn: asyncpg.Connection, run_id: str) -> None:
    """Record that ``run_started`` / ``thread_active`` were queued for the run."""
    await conn.execute("UPDATE runs SET start_announced = true WHERE run_id = $1", run_id)


async def mark_results_applied(conn: asyncpg.Connection, run_id: str, step: int) -> None:
    """Record that the result of the run's ``step`` was applied (``results_applied = step + 1``)."""
    await conn.execute("UPDATE runs SET results_applied = $2 + 1 WHERE run_id = $1", run_id, step)


async def advance_step(conn: asyncpg.Connection, run_id: str, step: int) -> int | None:
    """Move a ``running`` run whose ``step`` stored its result on to the next step (attempt 1,
    not started, the result applied). Returns the new step, or ``None`` when the row was not at
    ``step`` any more (nothing written)."""
    updated: int | None = await conn.fetchval(
        "UPDATE runs SET step = step + 1, attempt = 1, step_started = false, continued_from = NULL, "
        "results_applied = $2 + 1, updated_at = now() "
        "WHERE run_id = $1 AND step = $2 AND steps_done = $2 + 1 AND status = 'running' RETURNING step",
        run_id, step)
    return updated


async def claim_terminal(conn: asyncpg.Connection, run_id: str) -> asyncpg.Record | None:
    """Claim the right to emit the run's terminal chunks (exactly one emitter per run): the row's
    ``next_seq``, ``step``, ``attempt`` and ``outstanding`` (an attempt of the current step
    started and did not store its result), or ``None`` when they were claimed already."""
    return await conn.fetchrow(
        "UPDATE runs SET terminal_emitted = true WHERE run_id = $1 AND NOT terminal_emitted "
        "RETURNING next_seq, step, attempt, step_started AND steps_done = step AS outstanding", run_id)


async def mark_aborted(conn: asyncpg.Connection, run_id: str) -> None:
    """End the run ``aborted`` (``finish_reason`` ``abort``)."""
    await conn.execute("UPDATE runs SET status = 'aborted', finish_reason = 'abort', finished_at = now(), "
                       "updated_at = now() WHERE run_id = $1", run_id)


# --- the signals the orchestrator hands on ------------------------------------------------------
async def signal_exists(conn: asyncpg.Connection, signal_id: str) -> bool:
    """Whether a signal with the id ``signal_id`` is stored already."""
    return bool(await conn.fetchval("SELECT 1 FROM signals WHERE id = $1", signal_id))


async def next_waiting(conn: asyncpg.Connection, thread_id: str, prev_run_id: str) -> asyncpg.Record | None:
    """The oldest pending input of the thread (all of the ``signals`` row): a signal delivered to
    ``prev_run_id`` after its last drain first, then a queued turn; ``None`` when nothing waits."""
    return await conn.fetchrow(
        "SELECT * FROM signals WHERE thread_id = $1 AND status = 'pending' "
        "AND (run_id = $2 OR (mode = 'queue' AND run_id IS NULL)) ORDER BY (mode = 'queue'), seq LIMIT 1",
        thread_id, prev_run_id)


async def give_signal(conn: asyncpg.Connection, signal_id: str, run_id: str) -> None:
    """Make the signal the input of ``run_id`` (a leftover ``deliver`` becomes a ``wake``)."""
    await conn.execute("UPDATE signals SET run_id = $2, mode = CASE WHEN mode = 'deliver' THEN 'wake' ELSE mode END "
                       "WHERE id = $1", signal_id, run_id)
