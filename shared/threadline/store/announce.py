"""A continued step's announcement in one statement (decisions 98, 106): the orchestrator's
``Announce`` move written without a transaction of its own (:func:`threadline.flows.orchestration.announced`)."""

from __future__ import annotations

import asyncpg

from threadline.events import StepResult
from threadline.orchestration.runs import RunRow
from threadline.store.outbox import Queued, queued, stored_headers

_ANNOUNCE = (
    "WITH applied AS (UPDATE runs SET results_applied = $3 + 1 WHERE run_id = $1 AND epoch = $2 "
    "AND status = $9 AND step = $10 AND results_applied IS NOT DISTINCT FROM $11 "
    "AND continued_from IS NOT DISTINCT FROM $12 AND start_announced = $13 RETURNING run_id), "
    "claimed AS (INSERT INTO processed_events (consumer, event_id) SELECT 'orchestrator', $4 FROM applied "
    "ON CONFLICT DO NOTHING RETURNING event_id) "
    "INSERT INTO outbox (topic, key, headers, value) SELECT $5, $6, $7, $8 FROM claimed RETURNING id")
"""The run's ``results_applied`` moved on only while the row is the one
:func:`~threadline.orchestration.runs.on_step_result` answered ``Announce`` on (every column it
read, compared with what was read: a compare-and-set, not the rule again), the event claimed,
the ``step_finished`` lifecycle event queued; no row returned when any of it did not hold."""


async def announce_step(conn: asyncpg.Connection, res: StepResult, seen: RunRow, *, topic: str, key: str,
                        headers: list[tuple[str, bytes]], value: bytes) -> Queued | None:
    """Apply ``res`` (a ``continue`` whose next step the worker claimed) to the run as ``seen``
    (read unlocked) and queue the encoded lifecycle record (``topic``, ``key``, ``headers``,
    ``value``), in one statement holding the run's row lock only while it runs.

    Returns:
        The outbox id holding the record, or ``None`` when the row changed since it was read or
        the event was handled already (nothing written).
    """
    box_id: int | None = await conn.fetchval(
        _ANNOUNCE, res.run_id, res.epoch, res.step, res.event_id, topic, key, stored_headers(headers), value,
        seen.status, seen.step, seen.results_applied, seen.continued_from, seen.start_announced)
    return None if box_id is None else queued(box_id, topic, key, headers, value)
