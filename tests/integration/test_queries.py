"""The read model (``store/queries.py``): what the gateway, the CLI and the client read of
threads, messages, runs and agents reads the same through a service's pool and through one plain
connection, and another resource's thread reads as none."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid

import asyncpg
import orjson

from threadline.store import queries

CONTENT = {"format": 2, "parts": [{"type": "text", "text": "hi"}]}


async def _seed(conn: asyncpg.Connection, tag: str) -> tuple[str, str]:
    resource, thread = f"res-{tag}", f"thr-{tag}"
    await conn.execute("INSERT INTO threads (thread_id, resource_id, title, metadata) VALUES ($1, $2, 'T', $3::text::jsonb)",
                       thread, resource, orjson.dumps({"k": 1}).decode())
    for i, role in enumerate(("user", "assistant")):
        await conn.execute("INSERT INTO messages (id, thread_id, resource_id, run_id, role, type, content) "
                           "VALUES ($1, $2, $3, $4, $5, 'v2', $6::text::jsonb)", f"m{i}-{tag}", thread, resource,
                           f"run-{tag}", role, orjson.dumps(CONTENT).decode())
    await conn.execute("INSERT INTO runs (run_id, thread_id, resource_id, agent_id, epoch, usage) "
                       "VALUES ($1, $2, $3, 'a', 1, $4::text::jsonb)", f"run-{tag}", thread, resource,
                       orjson.dumps({"totalTokens": 3}).decode())
    await conn.execute("INSERT INTO thread_leases (thread_id, resource_id, run_id, epoch, expires_at) "
                       "VALUES ($1, $2, $3, 1, now() + interval '1 minute')", thread, resource, f"run-{tag}")
    return resource, thread


async def test_a_thread_reads_the_same_through_a_pool_and_a_connection(readers) -> None:
    db, conn = readers
    resource, thread = await _seed(conn, uuid.uuid4().hex[:10])
    for reader in (db, conn):
        assert await queries.thread_owner(reader, thread) == resource
        listed = await queries.list_threads(reader, resource_id=resource)
        assert [(t["id"], t["title"], t["metadata"]) for t in listed] == [(thread, "T", {"k": 1})]
        messages = await queries.list_messages(reader, resource_id=resource, thread_id=thread)
        assert [(m["role"], m["content"]) for m in messages] == [("user", CONTENT), ("assistant", CONTENT)]
        runs = await queries.list_runs(reader, resource_id=resource, thread_id=thread)
        assert [(r["status"], r["usage"], r["error"], r["finished_at"]) for r in runs] == [
            ("running", {"totalTokens": 3}, None, None)]
        assert await queries.active_run(reader, resource_id=resource, thread_id=thread) == runs[0]["run_id"]
        found = await queries.read_thread(reader, resource, thread)
        assert found is not None and found["metadata"] == {"k": 1} and isinstance(found["created_at"], str)


async def test_another_resources_thread_reads_as_none(readers) -> None:
    db, conn = readers
    _, thread = await _seed(conn, uuid.uuid4().hex[:10])
    assert await queries.thread_owner(db, f"{thread}-missing") is None
    assert await queries.list_messages(db, resource_id="someone-else", thread_id=thread) == []
    assert await queries.list_runs(db, resource_id="someone-else", thread_id=thread) == []
    assert await queries.active_run(db, resource_id="someone-else", thread_id=thread) is None
    assert await queries.read_thread(db, "someone-else", thread) is None


async def test_an_expired_lease_is_no_active_run(readers) -> None:
    db, conn = readers
    resource, thread = await _seed(conn, uuid.uuid4().hex[:10])
    await conn.execute("UPDATE thread_leases SET expires_at = now() - interval '1 second' WHERE thread_id = $1", thread)
    assert await queries.active_run(db, resource_id=resource, thread_id=thread) is None


async def test_the_cli_prints_a_threads_messages_and_refuses_another_resource(cluster, readers) -> None:
    _, conn = readers
    resource, thread = await _seed(conn, uuid.uuid4().hex[:10])
    env = {**os.environ, "THREADLINE_PG_DSN": cluster.dsn}

    def cli(res: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "threadline.cli", "thread", "-r", res, "-t", thread],
                              env=env, capture_output=True, text=True, timeout=60, check=False)

    ok = await asyncio.to_thread(cli, resource)
    lines = [orjson.loads(line) for line in ok.stdout.splitlines()]
    assert ok.returncode == 0, ok.stderr
    assert [(m["role"], m["content"], m["runId"]) for m in lines] == [("user", CONTENT, f"run-{thread[4:]}"),
                                                                     ("assistant", CONTENT, f"run-{thread[4:]}")]
    refused = await asyncio.to_thread(cli, "someone-else")
    assert refused.returncode != 0 and "no thread" in refused.stdout
