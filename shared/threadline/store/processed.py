"""Idempotency: each consumer (``ingress``, ``orchestrator``) handles an event id once.

:func:`claim_event` is the one way to claim an id; ingress also stores the reply it gave
(:func:`remember`) so a resent request is answered the same (:func:`remembered`).
"""

from __future__ import annotations

from typing import Any, Literal

import asyncpg

from threadline.events.base import Event

Consumer = Literal["ingress", "orchestrator"]


async def claim_event(conn: asyncpg.Connection, consumer: Consumer, event_id: str) -> bool:
    """Claim ``event_id`` for ``consumer`` in the caller's transaction: True the first time,
    False when it was handled (or is being handled) already."""
    return await conn.fetchval(
        "INSERT INTO processed_events (consumer, event_id) VALUES ($1, $2) "
        "ON CONFLICT DO NOTHING RETURNING true", consumer, event_id) is not None


async def remembered(conn: asyncpg.Connection, consumer: Consumer, event_id: str) -> dict[str, Any]:
    """The reply stored for a claimed ``event_id`` (``{}`` when none was stored)."""
    result: dict[str, Any] | None = await conn.fetchval(
        "SELECT result FROM processed_events WHERE consumer = $1 AND event_id = $2", consumer, event_id)
    return result or {}


async def remember(conn: asyncpg.Connection, consumer: Consumer, event_id: str, reply: Event) -> None:
    """Store the reply given to ``event_id`` (answered again on a resend)."""
    await conn.execute("UPDATE processed_events SET result = $3 WHERE consumer = $1 AND event_id = $2",
                       consumer, event_id, reply.dump())
