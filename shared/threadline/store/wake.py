"""A wake's writes in one statement: ingress starts a run on an idle thread by taking the (locked)
lease, creating the run, storing the signal, queueing its outbox records and remembering the
reply, as one round trip instead of seven (docs/decisions.md, decision 93)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
import orjson

from threadline.events.base import Event
from threadline.events.codec import encode
from threadline.store.leases import Lease
from threadline.store.outbox import Queued, queued, stored_headers
from threadline.store.runs import RUN_COLUMNS, SIGNAL_COLUMNS

_WAKE = f"""
WITH lease AS (
    UPDATE thread_leases SET run_id = $2, epoch = $3, expires_at = now() + make_interval(secs => $4),
           updated_at = now()
    WHERE thread_id = $1 AND epoch = $3 - 1
    RETURNING epoch
), run AS (
    INSERT INTO runs ({RUN_COLUMNS})
    SELECT $2, $1, $5, $6, $7, $8, $9, lease.epoch, $10, $11 FROM lease
    RETURNING 1
), sig AS (
    INSERT INTO signals ({SIGNAL_COLUMNS})
    SELECT $12, $1, $5, $6, $13, 'wake', 'pending', $2, $8, $14, $15 FROM lease
    RETURNING 1
), answered AS (
    UPDATE processed_events SET result = $16
    WHERE consumer = 'ingress' AND event_id = $8 AND EXISTS (SELECT 1 FROM lease)
    RETURNING 1
), box AS (
    INSERT INTO outbox (topic, key, headers, value)
    SELECT u.topic, u.key, u.headers::jsonb, u.value
    FROM unnest($17::text[], $18::text[], $19::text[], $20::bytea[]) WITH ORDINALITY
         AS u(topic, key, headers, value, n)
    WHERE EXISTS (SELECT 1 FROM lease)
    ORDER BY u.n
    RETURNING id
)
SELECT (SELECT count(*) FROM lease) + (SELECT count(*) FROM run) + (SELECT count(*) FROM sig)
       + (SELECT count(*) FROM answered) AS written,
       array(SELECT id FROM box ORDER BY id) AS ids
"""


@dataclass(frozen=True, slots=True)
class NewRun:
    """The run a wake creates (the columns of ``runs`` it sets)."""

    run_id: str
    agent_id: str
    kind: str
    request_id: str
    reply_to: str
    options: Mapping[str, Any]
    start_announced: bool


async def store_wake(conn: asyncpg.Connection, lease: Lease, run: NewRun, *, lease_ttl_s: float,
                     signal: Mapping[str, object], signal_options: Mapping[str, object], reply: Event,
                     records: Sequence[tuple[str, Event, str | None]]) -> list[Queued]:
    """In the caller's transaction, with ``lease`` locked by it (:func:`threadline.store.leases.lock_thread`):
    give the lease to ``run`` at :attr:`~threadline.store.leases.Lease.next_epoch`, insert the run (``running`` at that
    epoch) and ``signal`` (mode ``wake``, ``pending``, for the run), store ``reply`` as the answer
    to the request's event id (claimed by the caller) and queue ``records`` (``(topic, event,
    key)``, published in this order) in the outbox. One round trip. ``lease`` is updated to the
    run and epoch.

    Returns:
        The outbox ids, in ``records``' order, holding their records (flushed from memory).

    Raises:
        RuntimeError: the lease row was not at ``lease.epoch`` (the caller did not hold its lock).
    """
    epoch = lease.next_epoch
    encoded = [(topic, *encode(event), key) for topic, event, key in records]
    row = await conn.fetchrow(
        _WAKE, lease.thread_id, run.run_id, epoch, lease_ttl_s, lease.resource_id, run.agent_id, run.kind,
        run.request_id, run.reply_to, dict(run.options), run.start_announced, signal["id"], signal["type"], signal,
        dict(signal_options), reply.dump(), [t for t, _, _, _ in encoded], [k for _, _, _, k in encoded],
        [orjson.dumps(stored_headers(headers)).decode() for _, _, headers, _ in encoded],
        [value for _, value, _, _ in encoded])
    if row is None or row["written"] != 4 or len(row["ids"]) != len(records):
        raise RuntimeError(f"the lease of thread {lease.thread_id!r} moved while it was locked")
    lease.run_id, lease.epoch, lease.active = run.run_id, epoch, True
    return [queued(box_id, topic, key, headers, value)
            for box_id, (topic, value, headers, key) in zip(row["ids"], encoded, strict=True)]
