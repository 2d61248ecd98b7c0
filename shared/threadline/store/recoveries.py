"""The sweeper's rows (run-orchestrator): the runs that may be stuck, one claimed with its snapshot
fields (``FOR UPDATE SKIP LOCKED``: whichever orchestrator instance locks it first handles it, the
others skip it), the ``run_recoveries`` notes (migration 0010) and the writes of a recovery. What
to do with a claimed run is decided in :mod:`threadline.orchestration.recovery` and applied by
:mod:`threadline.flows.recovery`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import asyncpg

from threadline.store import leases
from threadline.topics import thread_key

_CANDIDATES = """
SELECT run_id FROM runs
WHERE status = 'running' AND NOT waiting_children AND updated_at < now() - make_interval(secs => $1)
  AND (step_heartbeat IS NULL OR step_heartbeat < now() - make_interval(secs => $1))
UNION
SELECT r.run_id FROM thread_leases l JOIN runs r ON r.run_id = l.run_id AND r.epoch = l.epoch
WHERE l.run_id IS NOT NULL AND r.status <> 'running' AND r.updated_at < now() - make_interval(secs => $1)
LIMIT $2
"""

_CLAIM = """
SELECT r.*, extract(epoch FROM now() - r.updated_at)::float8 AS idle_s,
       extract(epoch FROM now() - r.step_heartbeat)::float8 AS heartbeat_age_s,
       coalesce(l.run_id = r.run_id AND l.epoch = r.epoch, false) AS holds_lease,
       EXISTS (SELECT 1 FROM outbox o WHERE o.published_at IS NULL AND o.key = $2
               AND o.created_at > now() - make_interval(secs => $3)) AS outbox_pending,
       (SELECT count(*) FROM run_recoveries x WHERE x.run_id = r.run_id AND x.step = r.step)::int AS recoveries
FROM runs r LEFT JOIN thread_leases l ON l.thread_id = r.thread_id
WHERE r.run_id = $1
FOR UPDATE OF r SKIP LOCKED
"""


async def candidates(conn: asyncpg.Connection, *, stuck_after_s: float, limit: int = 200) -> list[str]:
    """Ids of runs that hold their thread and showed no progress for ``stuck_after_s`` (a cheap
    pre-filter; :func:`claim` takes the lock and the full snapshot)."""
    return [r["run_id"] for r in await conn.fetch(_CANDIDATES, stuck_after_s, limit)]


async def claim(conn: asyncpg.Connection, run_id: str, *, stuck_after_s: float) -> asyncpg.Record | None:
    """Lock ``run_id`` for this transaction and return its row with the snapshot fields
    (``idle_s``, ``heartbeat_age_s``, ``holds_lease``, ``outbox_pending``, ``recoveries``);
    ``None`` when another transaction holds it or its thread's lease row (a worker saving a
    step, an orchestrator applying a result: the run is not stuck then), or it is gone. The
    lease row is locked first (``threadline.store.leases``: the lock order)."""
    run = await conn.fetchrow("SELECT resource_id, thread_id FROM runs WHERE run_id = $1", run_id)
    if run is None:
        return None
    if await leases.held_elsewhere(conn, run["thread_id"]):
        return None
    return await conn.fetchrow(_CLAIM, run_id, thread_key(run["resource_id"], run["thread_id"]), stuck_after_s)


async def note(conn: asyncpg.Connection, run: asyncpg.Record, action: str, reason: str, instance: str) -> None:
    """Record one recovery of the run's current step and attempt (``action``: ``reschedule``,
    ``redeliver_result`` or ``fail``), by orchestrator ``instance``."""
    await conn.execute("INSERT INTO run_recoveries (run_id, step, attempt, action, reason, instance) "
                       "VALUES ($1, $2, $3, $4, $5, $6)", run["run_id"], run["step"], run["attempt"], action,
                       reason, instance)


async def clear_heartbeat(conn: asyncpg.Connection, run_id: str) -> None:
    """Forget the step owner's heartbeat (as a hand-back does), so the next worker re-executes the
    step at once; the run counts as touched now."""
    await conn.execute("UPDATE runs SET step_heartbeat = NULL, updated_at = now() WHERE run_id = $1", run_id)


async def touch(conn: asyncpg.Connection, run_id: str) -> None:
    """The run counts as touched now (the sweeper waits ``stuck_after_s`` again before it looks)."""
    await conn.execute("UPDATE runs SET updated_at = now() WHERE run_id = $1", run_id)


async def recent_records(conn: asyncpg.Connection, key: str, topic: str) -> list[asyncpg.Record]:
    """The last 50 outbox rows of ``key`` for ``topic``, newest first: ``id`` and ``value`` (the
    record's JSON bytes)."""
    return list(await conn.fetch("SELECT id, value FROM outbox WHERE key = $1 AND topic = $2 ORDER BY id DESC LIMIT 50",
                                 key, topic))


async def applied_by_orchestrator(conn: asyncpg.Connection, event_id: str | None) -> bool:
    """Whether the orchestrator recorded event ``event_id`` as handled."""
    return bool(await conn.fetchval("SELECT 1 FROM processed_events WHERE consumer = 'orchestrator' "
                                    "AND event_id = $1", event_id))


async def fail_run(conn: asyncpg.Connection, run_id: str, error: Mapping[str, object]) -> None:
    """End the run ``failed`` (``finish_reason`` ``error``) with ``error``."""
    await conn.execute("UPDATE runs SET status = 'failed', finish_reason = 'error', error = $2, "
                       "finished_at = now(), updated_at = now() WHERE run_id = $1", run_id, error)


async def set_next_seq(conn: asyncpg.Connection, run_id: str, seq: int) -> None:
    """The run's next chunk ``seq`` (after the chunks a recovery wrote for it)."""
    await conn.execute("UPDATE runs SET next_seq = $2 WHERE run_id = $1", run_id, seq)


async def end_signals(conn: asyncpg.Connection, run_id: str) -> list[dict[str, Any]]:
    """Mark consumed the run's own input and what it drained (its pending ``wake``/``queue``
    signals and those with a ``drained_step``); return their payloads."""
    return [r["payload"] for r in await conn.fetch(
        "UPDATE signals SET status = 'consumed', consumed_by_run = run_id, consumed_at = now() "
        "WHERE run_id = $1 AND status = 'pending' AND (mode IN ('wake', 'queue') OR drained_step IS NOT NULL) "
        "RETURNING payload", run_id)]
