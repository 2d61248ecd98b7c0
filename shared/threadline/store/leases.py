"""The per-thread lease (invariant 2, docs/decisions.md §13): one active run per thread, enforced by a
row lock and a fencing epoch that every write of a run checks.

Lock order: a transaction that locks a thread's lease row and one of its ``runs`` rows locks the
lease row first (decision 60), as the step functions of migrations 0011/0013/0017 do; the other
order deadlocks against a worker's step save."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from threadline.errors import StaleWriterError


@dataclass(slots=True)
class Lease:
    thread_id: str
    resource_id: str
    run_id: str | None
    epoch: int
    active: bool

    @property
    def next_epoch(self) -> int:
        """The epoch the thread's next run takes (:func:`take`, a wake's one statement)."""
        return self.epoch + 1


async def lock_thread(conn: asyncpg.Connection, resource_id: str, thread_id: str) -> Lease:
    """Create the thread's lease row if missing and lock it (``FOR UPDATE``) for this
    transaction. ``active`` is true while a run holds an unexpired lease. One statement: an
    upsert whose no-op update of the key locks the row as ``FOR UPDATE`` does (decision 94)."""
    row = await conn.fetchrow(
        "INSERT INTO thread_leases (thread_id, resource_id) VALUES ($1, $2) "
        "ON CONFLICT (thread_id) DO UPDATE SET thread_id = EXCLUDED.thread_id "
        "RETURNING run_id, epoch, (run_id IS NOT NULL AND expires_at > now()) AS active", thread_id, resource_id)
    return Lease(thread_id, resource_id, row["run_id"], row["epoch"], row["active"])


async def lock_row(conn: asyncpg.Connection, thread_id: str, *, skip_locked: bool = False) -> bool:
    """Lock the thread's lease row (``FOR UPDATE``) for this transaction, before any ``runs`` row of
    the thread (the lock order above). Returns ``False`` when there is no such row, or when
    ``skip_locked`` and another transaction holds it (nothing is locked then)."""
    clause = " SKIP LOCKED" if skip_locked else ""
    got = await conn.fetchval(f"SELECT 1 FROM thread_leases WHERE thread_id = $1 FOR UPDATE{clause}", thread_id)
    return got is not None


async def held_elsewhere(conn: asyncpg.Connection, thread_id: str) -> bool:
    """Lock the thread's lease row unless another transaction holds it: ``True`` when another does
    (nothing is locked then), ``False`` when this transaction holds it now or there is no row."""
    if await lock_row(conn, thread_id, skip_locked=True):
        return False
    return await conn.fetchval("SELECT 1 FROM thread_leases WHERE thread_id = $1", thread_id) is not None


async def take(conn: asyncpg.Connection, lease: Lease, run_id: str, ttl_s: float) -> int:
    """Give the (locked) lease to ``run_id``; return the new epoch (:attr:`Lease.next_epoch`)."""
    epoch: int = await conn.fetchval(
        "UPDATE thread_leases SET run_id = $2, epoch = epoch + 1, "
        "expires_at = now() + make_interval(secs => $3), updated_at = now() "
        "WHERE thread_id = $1 RETURNING epoch", lease.thread_id, run_id, ttl_s)
    lease.run_id, lease.epoch, lease.active = run_id, epoch, True
    return epoch


async def check(conn: asyncpg.Connection, thread_id: str, run_id: str, epoch: int, *,
                renew_s: float | None = None) -> None:
    """Fence: raise unless ``run_id`` still holds the thread at ``epoch``; optionally renew.

    Raises:
        StaleWriterError: the lease moved on (the run was aborted or superseded).
    """
    if renew_s is None:
        ok = await conn.fetchval(
            "SELECT 1 FROM thread_leases WHERE thread_id = $1 AND run_id = $2 AND epoch = $3 FOR UPDATE",
            thread_id, run_id, epoch)
    else:
        ok = await conn.fetchval(
            "UPDATE thread_leases SET expires_at = now() + make_interval(secs => $4), updated_at = now() "
            "WHERE thread_id = $1 AND run_id = $2 AND epoch = $3 RETURNING 1",
            thread_id, run_id, epoch, renew_s)
    if not ok:
        raise StaleWriterError(run_id, epoch)


async def release(conn: asyncpg.Connection, thread_id: str, run_id: str, epoch: int) -> bool:
    """Free the lease if ``run_id`` still holds it at ``epoch`` (a stale release changes nothing)."""
    status: str = await conn.execute(
        "UPDATE thread_leases SET run_id = NULL, expires_at = NULL, updated_at = now() "
        "WHERE thread_id = $1 AND run_id = $2 AND epoch = $3", thread_id, run_id, epoch)
    return status.endswith(" 1")


async def vacate(conn: asyncpg.Connection, thread_id: str, run_id: str) -> None:
    """Take the lease from ``run_id`` whatever its epoch, and move the epoch on (a late write of
    the old holder is fenced); nothing when another run holds the thread."""
    await conn.execute("UPDATE thread_leases SET run_id = NULL, expires_at = NULL, epoch = epoch + 1, "
                       "updated_at = now() WHERE thread_id = $1 AND run_id = $2", thread_id, run_id)


async def revoke(conn: asyncpg.Connection, thread_id: str) -> None:
    """Free the (locked) lease whoever holds it and move the epoch on, so every later write of
    the run that held it is fenced (an abort)."""
    await conn.execute("UPDATE thread_leases SET run_id = NULL, expires_at = NULL, epoch = epoch + 1, "
                       "updated_at = now() WHERE thread_id = $1", thread_id)
