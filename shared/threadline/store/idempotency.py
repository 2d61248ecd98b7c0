"""The ``idempotency_keys`` table (migration 0031): what a gateway knows of a write named by an
``Idempotency-Key`` (docs/decisions.md, 213). The decisions on a claim are in
:mod:`threadline.gateway.idempotency`; this module only reads and writes rows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg

KEEP_S = 24 * 3600
"""How long (s) a key is kept: a retry within it replays the first request; after it the key is new."""


@dataclass(frozen=True)
class KeyRow:
    """One key's row: the first request's ``fingerprint`` and ingress ``request_id``, and its
    answer (``status``, ``answer`` JSON) once the first request was answered (``None`` before).
    ``claimed`` is True for the caller whose insert made the row."""

    fingerprint: str
    request_id: str
    status: int | None
    answer: Any
    claimed: bool


async def claim(conn: asyncpg.Connection, *, scope: str, key: str, fingerprint: str, request_id: str) -> KeyRow:
    """The row of ``(scope, key)``: made now with ``fingerprint`` and ``request_id`` when there is
    none (or the one there is older than :data:`KEEP_S`), else the one stored. Two claims at once
    (two gateways) wait on the primary key: one makes the row, the other reads it."""
    made = await conn.fetchrow(
        "INSERT INTO idempotency_keys (scope, key, fingerprint, request_id) VALUES ($1, $2, $3, $4) "
        "ON CONFLICT (scope, key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, request_id = EXCLUDED.request_id, "
        "status = NULL, answer = NULL, created_at = now() "
        "WHERE idempotency_keys.created_at < now() - make_interval(secs => $5) "
        "RETURNING fingerprint", scope, key, fingerprint, request_id, float(KEEP_S))
    if made is not None:
        return KeyRow(fingerprint, request_id, None, None, claimed=True)
    row = await conn.fetchrow("SELECT fingerprint, request_id, status, answer FROM idempotency_keys "
                              "WHERE scope = $1 AND key = $2", scope, key)
    assert row is not None  # the conflict that stopped the insert is a committed row
    return KeyRow(row["fingerprint"], row["request_id"], row["status"], row["answer"], claimed=False)


async def record(conn: asyncpg.Connection, *, scope: str, key: str, request_id: str, status: int, answer: Any) -> None:
    """Keep the first answer of ``(scope, key)`` (its request ``request_id``), unless one is kept already."""
    await conn.execute("UPDATE idempotency_keys SET status = $4, answer = $5 "
                       "WHERE scope = $1 AND key = $2 AND request_id = $3 AND status IS NULL",
                       scope, key, request_id, status, answer)


async def forget_expired(conn: asyncpg.Connection, *, limit: int = 1000) -> int:
    """Delete up to ``limit`` rows older than :data:`KEEP_S`; how many were deleted."""
    done = await conn.execute(
        "DELETE FROM idempotency_keys WHERE ctid IN (SELECT ctid FROM idempotency_keys "
        "WHERE created_at < now() - make_interval(secs => $1) LIMIT $2)", float(KEEP_S), limit)
    return int(done.split()[-1])
