"""The lock order between a thread's lease row and its run's row (``threadline.store.leases``,
decision 60): every transaction that locks both locks the lease row first, as a worker's step
save does (migrations 0011/0013/0017). CI found the other order deadlock: the orchestrator
applying step 0's result held the run's row and waited for the lease row, while the worker's
save of the next attempt held the lease row and waited for the run's row."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from datetime import UTC, datetime, timedelta

import asyncpg

from tests.integration.pg import leased_run
from threadline.events import StepResult
from threadline.flows.orchestration import on_step_result
from threadline.store import recoveries
from threadline.store.db import Database
from threadline.topics import Topics


async def _running(conn: asyncpg.Connection) -> dict[str, str]:
    """A run at step 0 whose step is saved (steps_done 1), holding its thread at epoch 3, idle
    for a minute (a sweeper's candidate)."""
    tag = uuid.uuid4().hex[:10]
    r = {"run_id": f"run-lo-{tag}", "thread_id": f"th-lo-{tag}", "resource_id": "res-lo"}
    await leased_run(conn, **r, step=0, steps_done=1, updated_at=datetime.now(UTC) - timedelta(minutes=1))
    return r


async def _run_row_is_free(dsn: str, run_id: str) -> bool:
    conn = await asyncpg.connect(dsn)
    try:
        async with conn.transaction():
            await conn.execute("SELECT 1 FROM runs WHERE run_id = $1 FOR UPDATE NOWAIT", run_id)
        return True
    except asyncpg.exceptions.LockNotAvailableError:
        return False
    finally:
        await conn.close()


async def test_applying_a_step_result_waits_for_the_lease_row_before_it_locks_the_run(own_cluster):
    """A worker saving the next attempt holds the lease row and then wants the run's row (the
    order of ``threadline_save_step``). The orchestrator applying step 0's result must wait on
    the lease row without holding the run's row: both then finish, neither is a deadlock victim."""
    async with contextlib.AsyncExitStack() as stack:
        db = await stack.enter_async_context(Database(own_cluster.dsn, max_size=2))
        saver = await stack.enter_async_context(db.connection())
        orch = await stack.enter_async_context(db.connection())
        r = await _running(saver)
        save = saver.transaction()
        await save.start()
        await saver.execute("UPDATE thread_leases SET updated_at = now() WHERE thread_id = $1", r["thread_id"])
        res = StepResult(run_id=r["run_id"], resource_id=r["resource_id"], thread_id=r["thread_id"], step=0,
                         attempt=1, epoch=3, outcome="continue")
        applying = asyncio.create_task(on_step_result(orch, res, Topics(own_cluster.prefix), 60))
        await asyncio.sleep(0.5)
        assert not applying.done()  # it waits for the lease row the save holds
        assert await _run_row_is_free(own_cluster.dsn, r["run_id"]), \
            "the orchestrator holds the run's row while it waits for the lease row: the save deadlocks"
        await saver.execute("SELECT 1 FROM runs WHERE run_id = $1 FOR UPDATE", r["run_id"])  # the save goes on
        await save.commit()
        ids = await asyncio.wait_for(applying, 10)
        assert ids  # the next step's task (and its lifecycle events) queued
        row = await saver.fetchrow("SELECT step, results_applied FROM runs WHERE run_id = $1", r["run_id"])
        assert (row["step"], row["results_applied"]) == (1, 1)


async def test_the_sweeper_skips_a_run_whose_lease_row_is_held(own_cluster):
    """A sweeper that locked the run's row and then waited for the lease row (to end the run)
    deadlocked the same way: it skips a run whose lease row another transaction holds, and
    claims it once that transaction is over."""
    async with contextlib.AsyncExitStack() as stack:
        db = await stack.enter_async_context(Database(own_cluster.dsn, max_size=2))
        holder = await stack.enter_async_context(db.connection())
        sweeper = await stack.enter_async_context(db.connection())
        r = await _running(holder)
        held = holder.transaction()
        await held.start()
        await holder.execute("SELECT 1 FROM thread_leases WHERE thread_id = $1 FOR UPDATE", r["thread_id"])
        async with sweeper.transaction():
            assert await recoveries.claim(sweeper, r["run_id"], stuck_after_s=1) is None
        await held.rollback()
        async with sweeper.transaction():
            row = await recoveries.claim(sweeper, r["run_id"], stuck_after_s=1)
            assert row is not None and row["run_id"] == r["run_id"] and row["holds_lease"]
            assert not await _run_row_is_free(own_cluster.dsn, r["run_id"])  # claimed: the run's row is locked
