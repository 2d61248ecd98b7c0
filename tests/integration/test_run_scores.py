"""Scorer jobs (decision 71) against PostgreSQL: queued once per (run, scorer) however often the
``run_finished`` is read, claimed by one instance at a time, run again after a claim expired
unstored (its instance died), and stored once with one ``score`` outbox row."""

from __future__ import annotations

import asyncio
import uuid

from threadline.store import scores
from threadline.store.db import connect
from threadline.topics import Topics


async def test_a_job_is_queued_once_reclaimed_after_a_crash_and_stored_once(own_cluster):
    # a database of its own: the session's notification-scheduler claims any pending scorer job of
    # the session's database, and took "b" once its claim expired (CI)
    conn = await connect(own_cluster.dsn)
    topics = Topics(f"scores-{uuid.uuid4().hex[:6]}")
    run = {"run_id": f"run-{uuid.uuid4().hex}", "agent_id": "scored", "resource_id": "res-s", "thread_id": "th-s"}
    try:
        assert await scores.enqueue(conn, run, ["a", "b"]) == 2
        assert await scores.enqueue(conn, run, ["a", "b"]) == 0  # a redelivered run_finished
        first = [r for r in await scores.claim(conn, claim_s=0.3, limit=100) if r["run_id"] == run["run_id"]]
        assert sorted((r["scorer"], r["attempts"]) for r in first) == [("a", 1), ("b", 1)]
        again = [r for r in await scores.claim(conn, claim_s=0.3, limit=100) if r["run_id"] == run["run_id"]]
        assert again == []  # claimed: another instance skips them
        assert await scores.store(conn, topics, run=run, scorer="a", score=0.5, reason="ok", error=None)
        await asyncio.sleep(0.4)  # "b"'s instance died before storing: its claim expires
        retry = [r for r in await scores.claim(conn, claim_s=30, limit=100) if r["run_id"] == run["run_id"]]
        assert [(r["scorer"], r["attempts"]) for r in retry] == [("b", 2)]
        assert await scores.store(conn, topics, run=run, scorer="b", score=None, reason=None,
                                  error={"type": "ValueError", "message": "no score"})
        assert await scores.store(conn, topics, run=run, scorer="a", score=0.9, reason="late", error=None) is None
        listed = await scores.list_scores(conn, run["run_id"])
        assert [(s["scorer"], s["status"], s["score"], s["reason"]) for s in listed] == [
            ("a", "done", 0.5, "ok"), ("b", "failed", None, None)]
        assert listed[1]["error"] == {"type": "ValueError", "message": "no score"}
        boxed = await conn.fetchval("SELECT count(*) FROM outbox WHERE topic = $1", topics.lifecycle)
        assert boxed == 2
    finally:
        await conn.execute("DELETE FROM run_scores WHERE run_id = $1", run["run_id"])
        await conn.close()
