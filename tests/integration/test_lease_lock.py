"""``threadline.store.leases.lock_thread`` as one statement (decision 94): the thread's lease row is
created when missing and locked for the transaction; a second transaction waits for the first and
then reads what the first wrote."""

from __future__ import annotations

import asyncio
import uuid

from tests.integration.pg import statements as logged
from threadline.store import leases
from threadline.store.db import Database


async def test_a_missing_lease_row_is_created_idle_and_locked_in_one_statement(own_cluster):
    thread = f"th-ll-{uuid.uuid4().hex[:8]}"
    async with Database(own_cluster.dsn, max_size=1) as db, db.connection() as conn:
        async with conn.transaction(), logged(conn) as statements:
            lease = await leases.lock_thread(conn, "res-ll", thread)
        assert (lease.run_id, lease.epoch, lease.active) == (None, 0, False)
        assert len([q for q in statements if "thread_leases" in q]) == 1
        assert await conn.fetchval("SELECT resource_id FROM thread_leases WHERE thread_id = $1", thread) == "res-ll"


async def test_a_second_transaction_waits_for_the_lock_then_sees_the_first_ones_run(own_cluster):
    thread = f"th-ll-{uuid.uuid4().hex[:8]}"
    async with Database(own_cluster.dsn, max_size=2) as db, db.connection() as first, db.connection() as second:
        tx = first.transaction()
        await tx.start()
        lease = await leases.lock_thread(first, "res-ll", thread)
        await leases.take(first, lease, "run-ll-1", 60)

        async def other() -> leases.Lease:
            async with second.transaction():
                return await leases.lock_thread(second, "res-ll", thread)

        waiting = asyncio.create_task(other())
        await asyncio.sleep(0.3)
        assert not waiting.done()  # the row is locked by the first transaction
        await tx.commit()
        seen = await asyncio.wait_for(waiting, 5)
        assert (seen.run_id, seen.epoch, seen.active) == ("run-ll-1", 1, True)


async def test_an_active_lease_is_read_as_held(own_cluster):
    thread = f"th-ll-{uuid.uuid4().hex[:8]}"
    async with Database(own_cluster.dsn, max_size=1) as db, db.connection() as conn:
        await conn.execute("INSERT INTO thread_leases (thread_id, resource_id, run_id, epoch, expires_at) "
                           "VALUES ($1, 'res-ll', 'run-ll-2', 4, now() + interval '1 minute')", thread)
        async with conn.transaction():
            lease = await leases.lock_thread(conn, "res-ll", thread)
        assert (lease.run_id, lease.epoch, lease.active) == ("run-ll-2", 4, True)
        await conn.execute("UPDATE thread_leases SET expires_at = now() - interval '1 second' WHERE thread_id = $1",
                           thread)
        async with conn.transaction():
            expired = await leases.lock_thread(conn, "res-ll", thread)
        assert (expired.run_id, expired.active) == ("run-ll-2", False)
