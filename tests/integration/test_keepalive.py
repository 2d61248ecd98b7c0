"""The worker's batched keep-alive (found by the concurrency benchmark): every
step in flight keeps its heartbeat and its thread lease alive with one pooled connection per beat,
however many steps there are; a step taken over and a lease lost are told apart from live ones."""

from __future__ import annotations

import contextlib
import uuid
from types import SimpleNamespace

import structlog

from threadline.store.db import Database
from threadline.worker.keepalive import KeepAlive

OWNER = "worker-a:1:x"


async def _steps(db: Database, n: int) -> list[dict]:
    tag = uuid.uuid4().hex[:8]
    runs = [{"run_id": f"run-ka-{tag}-{i}", "thread_id": f"th-ka-{tag}-{i}", "epoch": 3} for i in range(n)]
    async with db.connection() as conn:
        await conn.executemany(
            "INSERT INTO thread_leases (thread_id, resource_id, run_id, epoch, expires_at) "
            "VALUES ($1, 'res-ka', $2, $3, now() + interval '1 second')",
            [(r["thread_id"], r["run_id"], r["epoch"]) for r in runs])
        await conn.executemany(
            "INSERT INTO runs (run_id, thread_id, resource_id, agent_id, epoch, attempt, step_owner) "
            "VALUES ($1, $2, 'res-ka', 'agent', $3, 2, $4)",
            [(r["run_id"], r["thread_id"], r["epoch"], OWNER) for r in runs])
    return runs


class CountingDb:
    """The service's Database, counting how many pooled connections are taken."""

    def __init__(self, db: Database) -> None:
        self.db, self.acquired = db, 0

    @contextlib.asynccontextmanager
    async def connection(self):
        self.acquired += 1
        async with self.db.connection() as conn:
            yield conn


async def test_one_connection_per_beat_for_every_step_in_flight(own_cluster):
    async with Database(own_cluster.dsn, max_size=1, acquire_timeout_s=5) as db:
        runs = await _steps(db, 300)
        counting = CountingDb(db)
        ka = KeepAlive(counting, OWNER, beat_s=3600, renew_every_s=3600, lease_ttl_s=120)
        for r in runs:
            ka.add(r, SimpleNamespace(attempt=2))
        try:
            await ka.beat(renew=True)
        finally:
            await ka.close()
        assert counting.acquired == 1
        ids = [r["run_id"] for r in runs]
        beats = await db.fetch("SELECT step_heartbeat FROM runs WHERE run_id = ANY($1::text[])", ids)
        assert len(beats) == 300 and all(b["step_heartbeat"] is not None for b in beats)
        leases = await db.fetch("SELECT expires_at > now() + interval '60 seconds' AS renewed FROM thread_leases "
                                "WHERE run_id = ANY($1::text[])", ids)
        assert len(leases) == 300 and all(r["renewed"] for r in leases)
        assert all(s.owned and s.lease_held for s in ka._steps.values())


async def test_a_step_taken_over_or_fenced_out_is_no_longer_kept_alive(own_cluster):
    async with Database(own_cluster.dsn, max_size=2) as db:
        live, taken, fenced = await _steps(db, 3)
        await db.execute("UPDATE runs SET step_owner = 'worker-b:2:y' WHERE run_id = $1", taken["run_id"])
        await db.execute("UPDATE thread_leases SET epoch = epoch + 1 WHERE thread_id = $1", fenced["thread_id"])
        ka = KeepAlive(db, OWNER, beat_s=3600, renew_every_s=3600, lease_ttl_s=120)
        for r in (live, taken, fenced):
            ka.add(r, SimpleNamespace(attempt=2))
        try:
            await ka.beat(renew=True)
        finally:
            await ka.close()
        state = {s.run_id: (s.owned, s.lease_held) for s in ka._steps.values()}
        assert state[live["run_id"]] == (True, True)
        assert state[taken["run_id"]] == (False, True)  # another worker's step: its heartbeat is not ours to move
        assert state[fenced["run_id"]] == (False, False)  # the lease moved on: nothing renewed, every write fenced
        row = await db.fetchrow("SELECT step_heartbeat FROM runs WHERE run_id = $1", taken["run_id"])
        assert row["step_heartbeat"] is None
        lease = await db.fetchrow("SELECT expires_at < now() + interval '60 seconds' AS untouched FROM thread_leases "
                                  "WHERE thread_id = $1", fenced["thread_id"])
        assert lease["untouched"]
        ka.discard(live["run_id"])
        assert live["run_id"] not in ka._steps


async def test_a_step_ended_under_a_beat_is_not_reported_lost_but_a_taken_step_is_at_the_next_beat(own_cluster):
    """The 300-run burst logged "step taken over" for steps that simply finished: a beat waiting
    for the run's row while the step's end committed found the run no longer running, and the
    store hands the run back to the keep-alive only after its connection is released. A lost
    step is now told at the next beat, if it is still kept alive then."""
    async with Database(own_cluster.dsn, max_size=2) as db:
        ended, taken = await _steps(db, 2)
        ka = KeepAlive(db, OWNER, beat_s=3600, renew_every_s=3600, lease_ttl_s=120)
        for r in (ended, taken):
            ka.add(r, SimpleNamespace(attempt=2))
        await db.execute("UPDATE runs SET status = 'finished' WHERE run_id = $1", ended["run_id"])
        await db.execute("DELETE FROM thread_leases WHERE run_id = $1", ended["run_id"])
        await db.execute("UPDATE runs SET step_owner = 'worker-b:2:y' WHERE run_id = $1", taken["run_id"])
        try:
            with structlog.testing.capture_logs() as first:
                await ka.beat(renew=True)
            ka.discard(ended["run_id"])  # the store hands the ended step back
            with structlog.testing.capture_logs() as second:
                await ka.beat(renew=True)
        finally:
            await ka.close()
        assert not [e for e in first if e["log_level"] == "warning"], first
        told = [(e["event"], e["run_id"]) for e in second if e["log_level"] == "warning"]
        assert told == [("step taken over by another worker, or the run lost the thread", taken["run_id"])]
        assert not ka._steps[taken["run_id"]].owned  # no longer beaten from the first miss on
