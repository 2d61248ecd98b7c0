"""The state lanes of a thread (``state_lanes``): the current value of each lane that ingress
tracks for ``state`` signals (:func:`threadline.orchestration.routing.decide_state`)."""

from __future__ import annotations

import asyncpg


async def lock_lane(conn: asyncpg.Connection, thread_id: str, lane_id: str) -> asyncpg.Record | None:
    """The lane's row (all of it) locked ``FOR UPDATE`` for the caller's transaction, or ``None``
    when the lane has no value yet."""
    return await conn.fetchrow("SELECT * FROM state_lanes WHERE thread_id = $1 AND lane_id = $2 FOR UPDATE",
                               thread_id, lane_id)


async def save_lane(conn: asyncpg.Connection, thread_id: str, lane_id: str, *, cache_key: str, mode: str,
                    version: int, signal_id: str) -> None:
    """Store the lane's next value: ``cache_key``, ``mode`` (a ``snapshot`` also becomes the
    lane's last snapshot), ``version`` and the signal that carried it."""
    await conn.execute(
        "INSERT INTO state_lanes (thread_id, lane_id, current_cache_key, current_mode, version, last_signal_id, "
        "last_snapshot_signal_id) VALUES ($1, $2, $3, $4, $5, $6, CASE WHEN $4 = 'snapshot' THEN $6 END) "
        "ON CONFLICT (thread_id, lane_id) DO UPDATE SET current_cache_key = EXCLUDED.current_cache_key, "
        "current_mode = EXCLUDED.current_mode, version = EXCLUDED.version, last_signal_id = EXCLUDED.last_signal_id, "
        "last_snapshot_signal_id = CASE WHEN EXCLUDED.current_mode = 'snapshot' THEN EXCLUDED.last_signal_id "
        "ELSE state_lanes.last_snapshot_signal_id END, updated_at = now()",
        thread_id, lane_id, cache_key, mode, version, signal_id)
