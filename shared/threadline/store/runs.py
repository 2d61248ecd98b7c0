"""Runs and the signals addressed to them: the rows ingress and the orchestrator create."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import asyncpg

from threadline.events.signals import signal_to_message
from threadline.store.db import Database

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


async def run_status(conn: Database | asyncpg.Connection, run_id: str) -> str | None:
    """The run's ``status`` (``running``, ``finished``, ``failed``, ``aborted`` or ``tripwire``), or
    ``None`` when there is no such run."""
    row = await conn.fetchrow("SELECT status FROM runs WHERE run_id = $1", run_id)
    return None if row is None else str(row["status"])
