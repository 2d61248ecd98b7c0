"""Deleting a thread (``store/thread_rows.delete_thread``, decision 156): its row, messages,
signals, inbox and state lanes go in one transaction; its runs and its lease (the fencing epoch)
stay; another resource's thread is missing; a thread with a running run is refused untouched."""

from __future__ import annotations

import uuid

import asyncpg
import orjson

from threadline.store import queries, thread_rows

CONTENT = orjson.dumps({"format": 2, "parts": [{"type": "text", "text": "hi"}]}).decode()
TABLES = ("messages", "signals", "notifications", "state_lanes", "threads")


async def _seed(conn: asyncpg.Connection, *, status: str) -> tuple[str, str, str]:
    tag = uuid.uuid4().hex[:10]
    resource, thread, run = f"res-{tag}", f"thr-{tag}", f"run-{tag}"
    await conn.execute("INSERT INTO threads (thread_id, resource_id) VALUES ($1, $2)", thread, resource)
    await conn.execute("INSERT INTO messages (id, thread_id, resource_id, run_id, role, content) "
                       "VALUES ($1, $2, $3, $4, 'user', $5::text::jsonb)", f"m-{tag}", thread, resource, run, CONTENT)
    await conn.execute("INSERT INTO runs (run_id, thread_id, resource_id, agent_id, epoch, status) "
                       "VALUES ($1, $2, $3, 'a', 3, $4)", run, thread, resource, status)
    await conn.execute("INSERT INTO thread_leases (thread_id, resource_id, epoch) VALUES ($1, $2, 3)", thread, resource)
    await conn.execute("INSERT INTO signals (id, thread_id, resource_id, type, mode, status, payload) "
                       "VALUES ($1, $2, $3, 'user', 'queue', 'pending', '{}')", f"s-{tag}", thread, resource)
    await conn.execute("INSERT INTO notifications (id, resource_id, thread_id, agent_id, source, kind, priority, summary) "
                       "VALUES ($1, $2, $3, 'a', 'ci', 'build', 'low', 'green')", f"n-{tag}", resource, thread)
    await conn.execute("INSERT INTO state_lanes (thread_id, lane_id, current_cache_key, current_mode, version, "
                       "last_signal_id) VALUES ($1, 'l', 'k', 'snapshot', 1, 's')", thread)
    return resource, thread, run


async def _counts(conn: asyncpg.Connection, thread: str) -> dict[str, int]:
    return {t: await conn.fetchval(f"SELECT count(*) FROM {t} WHERE thread_id = $1", thread) for t in TABLES}


async def test_a_thread_is_deleted_with_what_is_read_through_it(readers) -> None:
    db, conn = readers
    resource, thread, run = await _seed(conn, status="finished")
    assert await thread_rows.delete_thread(db, thread_id=thread, resource_id=resource) == "deleted"
    assert await _counts(conn, thread) == dict.fromkeys(TABLES, 0)
    assert await queries.thread_owner(db, thread) is None
    assert await conn.fetchval("SELECT status FROM runs WHERE run_id = $1", run) == "finished"
    assert await conn.fetchval("SELECT epoch FROM thread_leases WHERE thread_id = $1", thread) == 3
    assert await thread_rows.delete_thread(db, thread_id=thread, resource_id=resource) == "missing"


async def test_another_resources_thread_is_missing_and_kept(readers) -> None:
    db, conn = readers
    _, thread, _ = await _seed(conn, status="finished")
    assert await thread_rows.delete_thread(db, thread_id=thread, resource_id="someone-else") == "missing"
    assert await _counts(conn, thread) == dict.fromkeys(TABLES, 1)


async def test_a_thread_with_a_running_run_is_refused_untouched(readers) -> None:
    db, conn = readers
    resource, thread, _ = await _seed(conn, status="running")
    assert await thread_rows.delete_thread(db, thread_id=thread, resource_id=resource) == "active"
    assert await _counts(conn, thread) == dict.fromkeys(TABLES, 1)
