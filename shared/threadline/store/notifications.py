"""The ``notifications`` table as ingress and the notification-scheduler write it (migrations
0005, 0007): a record stored or merged, its schedule, its delivery marks and failures, and the
scheduler's claims. What to do with a record is decided in :mod:`threadline.inbox.policy` and
applied by :mod:`threadline.flows.inbox`; applications read and mark records through
:mod:`threadline.store.inbox_access`.

Rows come back as ``asyncpg.Record`` with every column (``RETURNING *``); the caller holds the
thread's lease row first (the lock order of :mod:`threadline.store.leases`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

import asyncpg

from threadline.events.ingress import NotificationInput
from threadline.ids import new_id

_ACTIVE = ("EXISTS (SELECT 1 FROM thread_leases l WHERE l.thread_id = n.thread_id AND l.run_id IS NOT NULL "
           "AND l.expires_at > now())")
_WAITS_FOR_IDLE = "(n.priority = 'low' OR (n.summarized AND n.summary_at IS NULL))"
"""Records that never enter an active run: low ones (Threadline's N7 decision) and high ones whose
summary already reached the run (delivered in full when the thread goes idle, docs/decisions.md §11);
``flows/inbox.py``'s ``_waits_for_idle`` is the same rule over a row."""


async def upsert(conn: asyncpg.Connection, *, thread_id: str, resource_id: str, agent_id: str,
                 n: NotificationInput) -> asyncpg.Record:
    """Create the record of notification ``n`` (its ``source``, ``kind``, ``priority``, ``summary``,
    ``payload``, ``dedupe_key``, ``coalesce_key``, ``attributes``, ``metadata``), or replace a
    pending duplicate (same thread, source, kind, dedupe key)."""
    if n.dedupe_key:
        row = await conn.fetchrow(
            "UPDATE notifications SET summary = $5, payload = coalesce($6, payload), priority = $7, "
            "attributes = attributes || $8, metadata = metadata || $9, coalesced_count = coalesced_count + 1, "
            "updated_at = now() WHERE thread_id = $1 AND source = $2 AND kind = $3 AND dedupe_key = $4 "
            "AND status = 'pending' RETURNING *",
            thread_id, n.source, n.kind, n.dedupe_key, n.summary, n.payload, n.priority, n.attributes, n.metadata)
        if row is not None:
            return row
    return await conn.fetchrow(
        "INSERT INTO notifications (id, thread_id, resource_id, agent_id, source, kind, priority, summary, payload, "
        "dedupe_key, coalesce_key, attributes, metadata) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13) RETURNING *",
        new_id("ntf"), thread_id, resource_id, agent_id, n.source, n.kind, n.priority, n.summary,
        n.payload, n.dedupe_key, n.coalesce_key, n.attributes, n.metadata)


async def read(conn: asyncpg.Connection, record_id: str) -> asyncpg.Record | None:
    """The record ``record_id``, or ``None``."""
    return await conn.fetchrow("SELECT * FROM notifications WHERE id = $1", record_id)


async def pending_count(conn: asyncpg.Connection, thread_id: str) -> int:
    """How many records of the thread are ``pending``."""
    return int(await conn.fetchval("SELECT count(*) FROM notifications WHERE thread_id = $1 AND status = 'pending'",
                                   thread_id))


async def discard(conn: asyncpg.Connection, record_id: str, reason: str | None) -> asyncpg.Record:
    """Mark the record ``discarded`` (no longer held) with ``reason``."""
    return await conn.fetchrow("UPDATE notifications SET status = 'discarded', discarded_at = now(), held = false, "
                               "delivery_reason = $2, updated_at = now() WHERE id = $1 RETURNING *", record_id, reason)


async def keep(conn: asyncpg.Connection, record_id: str, reason: str | None, *, held: bool) -> asyncpg.Record:
    """Keep the record in the inbox, unscheduled: ``held`` ones are decided again when the thread
    goes idle."""
    return await conn.fetchrow("UPDATE notifications SET delivery_reason = $2, deliver_at = NULL, summary_at = NULL, "
                               "held = $3, updated_at = now() WHERE id = $1 RETURNING *", record_id, reason, held)


async def schedule(conn: asyncpg.Connection, record_id: str, *, deliver_at: datetime | None,
                   summary_at: datetime | None, reason: str | None) -> asyncpg.Record:
    """Schedule the record: its full delivery at ``deliver_at`` (``None``: unchanged) and its
    summary at ``summary_at`` (``None``: none)."""
    return await conn.fetchrow("UPDATE notifications SET deliver_at = coalesce($2, deliver_at), summary_at = $3, "
                               "delivery_reason = $4, held = false, updated_at = now() WHERE id = $1 RETURNING *",
                               record_id, deliver_at, summary_at, reason)


async def mark_summarized(conn: asyncpg.Connection, record_ids: list[str], signal_id: str) -> list[asyncpg.Record]:
    """The records' summary went out as signal ``signal_id``: no summary is due any more."""
    return list(await conn.fetch("UPDATE notifications SET summary_at = NULL, summarized = true, summary_signal_id = $2, "
                                 "updated_at = now() WHERE id = ANY($1::text[]) RETURNING *", record_ids, signal_id))


async def mark_delivered(conn: asyncpg.Connection, record_ids: list[str], signal_id: str,
                         reason: str | None) -> list[asyncpg.Record]:
    """The records went out as signal ``signal_id``: ``delivered``, unscheduled, no longer held
    (``reason`` replaces the delivery reason unless ``None``)."""
    return list(await conn.fetch(
        "UPDATE notifications SET status = 'delivered', delivered_at = now(), delivered_signal_id = $2, "
        "delivery_reason = coalesce($3, delivery_reason), deliver_at = NULL, summary_at = NULL, held = false, "
        "updated_at = now() WHERE id = ANY($1::text[]) RETURNING *", record_ids, signal_id, reason))


async def record_failure(conn: asyncpg.Connection, record_id: str, *, attempts: int, error: str, now: datetime,
                         retry_at: datetime, max_attempts: int,
                         column: Literal["deliver_at", "summary_at"]) -> None:
    """A failed delivery: ``attempts`` (the new count), the error, and ``column`` (the schedule to
    move) at ``retry_at``; ``failed`` and unscheduled once ``attempts`` reaches ``max_attempts``."""
    await conn.execute(
        f"UPDATE notifications SET delivery_attempts = $2::int, last_delivery_attempt_at = $5, "
        f"last_delivery_error = $3, status = CASE WHEN $2::int >= $4::int THEN 'failed' ELSE status END, "
        f"{column} = CASE WHEN $2::int >= $4::int THEN NULL ELSE $6::timestamptz END, updated_at = now() "
        f"WHERE id = $1",
        record_id, attempts, error, max_attempts, now, retry_at)


async def due_threads(conn: asyncpg.Connection, *, now: datetime, thread_id: str | None,
                      limit: int) -> list[tuple[str, str]]:
    """``(resource_id, thread_id)`` of at most ``limit`` threads (only ``thread_id`` when given)
    with a pending record whose delivery or summary is due at ``now``, the longest due first;
    records that wait for idle do not count while their thread is active."""
    rows = await conn.fetch(
        f"SELECT n.resource_id, n.thread_id FROM notifications n WHERE n.status = 'pending' "
        f"AND least(n.deliver_at, n.summary_at) <= $3 AND ($1::text IS NULL OR n.thread_id = $1) "
        f"AND NOT ({_WAITS_FOR_IDLE} AND {_ACTIVE}) "
        f"GROUP BY n.resource_id, n.thread_id ORDER BY min(least(n.deliver_at, n.summary_at)) LIMIT $2",
        thread_id, limit, now)
    return [(r["resource_id"], r["thread_id"]) for r in rows]


async def claim_due(conn: asyncpg.Connection, thread_id: str, now: datetime) -> list[asyncpg.Record]:
    """Lock and return (at most 1000, skipping locked ones) the thread's pending records due at
    ``now``, the longest due first."""
    return list(await conn.fetch(
        "SELECT * FROM notifications WHERE thread_id = $1 AND status = 'pending' "
        "AND least(deliver_at, summary_at) <= $2 ORDER BY least(deliver_at, summary_at), updated_at "
        "LIMIT 1000 FOR UPDATE SKIP LOCKED", thread_id, now))


async def claim_held(conn: asyncpg.Connection, thread_id: str) -> list[asyncpg.Record]:
    """Lock and return (skipping locked ones) the thread's pending ``held`` records, oldest first."""
    return list(await conn.fetch("SELECT * FROM notifications WHERE thread_id = $1 AND status = 'pending' AND held "
                                 "ORDER BY created_at, id FOR UPDATE SKIP LOCKED", thread_id))
