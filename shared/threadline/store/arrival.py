"""A request's arrival at ingress in one statement: claim its event id, create (or touch) its
thread and create-and-lock the thread's lease row, as one round trip instead of three
(docs/decisions.md, decision 96)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import asyncpg

from threadline.store.leases import Lease

_ARRIVE = """
WITH claimed AS (
    INSERT INTO processed_events (consumer, event_id) VALUES ('ingress', $1::text)
    ON CONFLICT DO NOTHING
    RETURNING 1
), thread AS (
    INSERT INTO threads (thread_id, resource_id, title, metadata)
    SELECT $2::text, $3::text, $4::text, coalesce($5::jsonb, '{}'::jsonb)
    WHERE $6::boolean AND EXISTS (SELECT 1 FROM claimed)
    ON CONFLICT (thread_id) DO UPDATE SET
        title = coalesce(EXCLUDED.title, threads.title),
        metadata = CASE WHEN $5::jsonb IS NULL THEN threads.metadata ELSE threads.metadata || $5::jsonb END,
        updated_at = CASE WHEN $4 IS NULL AND $5::jsonb IS NULL THEN threads.updated_at ELSE now() END
    WHERE threads.resource_id = EXCLUDED.resource_id  -- another resource's thread: not touched, no row returned
    RETURNING resource_id
), lease AS (
    INSERT INTO thread_leases (thread_id, resource_id)
    SELECT $2::text, $3::text WHERE (SELECT resource_id FROM thread) = $3::text
    ON CONFLICT (thread_id) DO UPDATE SET thread_id = EXCLUDED.thread_id
    RETURNING run_id, epoch, (run_id IS NOT NULL AND expires_at > now()) AS active
)
SELECT EXISTS (SELECT 1 FROM claimed) AS claimed, (SELECT resource_id FROM thread) AS owner, l.run_id, l.epoch,
       l.active
FROM (SELECT 1) AS one LEFT JOIN lease AS l ON true
"""


@dataclass(frozen=True, slots=True)
class Arrival:
    """What :func:`arrive` found and did."""

    claimed: bool
    """The event id was claimed now (``False``: handled, or being handled, already; nothing else done)."""
    owned: bool
    """The thread is the request's resource's (created now if missing); ``False`` when not
    claimed, not asked (``thread=False``), or the thread belongs to another resource."""
    lease: Lease | None
    """The thread's lease row, locked by the caller's transaction until it ends (``FOR UPDATE``
    strength, decision 94), when ``owned``."""


async def arrive(conn: asyncpg.Connection, event_id: str, resource_id: str, thread_id: str, *,
                 thread: Mapping[str, object] | None = None, open_thread: bool = True) -> Arrival:
    """In the caller's transaction: claim ``event_id`` for ingress, and, when claimed and
    ``open_thread`` (the caller found nothing to refuse), create the thread row if missing (its
    ``title`` / ``metadata`` from ``thread`` set or merged; a thread of another resource is left
    as it is) and, when the thread is ``resource_id``'s, create its lease row if missing and lock
    it. One statement; the lock order of :mod:`threadline.store.leases` holds (no ``runs`` row is
    touched).

    The run that holds the lease is named by id only: a statement that waited for the lease row's
    lock reads other tables as they were before it waited, so the caller reads that run's row in
    a statement of its own.
    """
    row = await conn.fetchrow(_ARRIVE, event_id, thread_id, resource_id, (thread or {}).get("title"),
                              (thread or {}).get("metadata"), open_thread)
    assert row is not None  # one row, always
    owned = row["owner"] == resource_id
    lease = Lease(thread_id, resource_id, row["run_id"], row["epoch"], row["active"]) if owned else None
    return Arrival(claimed=row["claimed"], owned=owned, lease=lease)
