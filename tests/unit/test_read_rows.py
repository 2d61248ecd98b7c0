"""The client's PostgreSQL reads answer the rows the gateway serves: the store's ``datetime``
times become ISO-8601 text, a running run's ``finished_at`` stays ``None``, everything else is
passed through as read."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson

from threadline.client.postgres_reader import _message, _run, _thread
from threadline.events.rows import MessageRow, RunRow, ThreadSummary

CREATED = datetime(2026, 12, 6, 7, 0, 1, 250_000, tzinfo=UTC)
UPDATED = datetime(2026, 12, 6, 7, 5, tzinfo=UTC)


def test_a_thread_row_reads_with_iso_times_and_its_metadata_as_stored() -> None:
    row: ThreadSummary[datetime] = {"id": "t1", "title": None, "metadata": {"topic": ["billing", 2]},
                                    "created_at": CREATED, "updated_at": UPDATED}
    out = _thread(row)
    assert out == {"id": "t1", "title": None, "metadata": {"topic": ["billing", 2]},
                   "created_at": "2026-12-06T07:00:01.250000+00:00", "updated_at": "2026-12-06T07:05:00+00:00"}
    assert row["created_at"] is CREATED  # the store's row is left as it was


def test_a_message_row_reads_with_an_iso_time() -> None:
    row: MessageRow[datetime] = {"id": "m1", "run_id": None, "role": "user", "type": None,
                                 "content": {"format": 2, "parts": [{"type": "text", "text": "hi"}]},
                                 "created_at": CREATED}
    assert _message(row) == {**row, "created_at": CREATED.isoformat()}


def test_a_running_run_keeps_finished_at_none_and_a_finished_one_reads_it_as_iso() -> None:
    running: RunRow[datetime] = {
        "run_id": "r1", "agent_id": "a", "kind": "stream", "status": "running", "step": 0, "steps_done": 0,
        "finish_reason": None, "text": None, "usage": None, "error": None, "tripwire": None,
        "created_at": CREATED, "finished_at": None}
    assert _run(running)["finished_at"] is None
    assert _run(running)["created_at"] == CREATED.isoformat()
    finished: RunRow[datetime] = {**running, "status": "finished", "usage": {"inputTokens": 3},
                                  "finished_at": UPDATED}
    out = _run(finished)
    assert out["finished_at"] == UPDATED.isoformat()
    assert out["usage"] == {"inputTokens": 3}
    orjson.dumps(out)  # JSON as it is, as the gateway's answer is
