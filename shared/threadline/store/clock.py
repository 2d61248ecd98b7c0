"""The notification-scheduler's clock: when is a record due (``deliver_at`` / ``summary_at``).

In production "now" is PostgreSQL's ``now()`` (one clock for every scheduler instance, the same
one that stamps ``created_at``). Tests must cross delivery windows (a 30-minute digest, retry
backoffs) without sleeping through them, so a scheduler started with
``THREADLINE_SCHEDULER_TEST_CLOCK=1`` adds an offset read from the table ``inbox_test_clock``
(created by that scheduler; it exists in no migration). Both are needed: a production scheduler
never reads the table, and the table exists only in databases a test clock was used on. The
scheduler logs a warning at start when the test clock is on.

Only the *due* checks and retry schedules use this clock; thread leases (active / idle) keep
real time.
"""

from __future__ import annotations

import contextlib
from datetime import datetime

import asyncpg

TABLE = "inbox_test_clock"
_CREATE = (f"CREATE TABLE IF NOT EXISTS {TABLE} (id integer PRIMARY KEY CHECK (id = 1), "
           "offset_s double precision NOT NULL DEFAULT 0)")


class SchedulerClock:
    """``await clock.now(conn)``: the scheduler's current time (timestamptz, UTC).

    Args:
        test_clock: read the offset from ``inbox_test_clock`` (tests only).
    """

    def __init__(self, *, test_clock: bool = False) -> None:
        self.test_clock = test_clock
        self._ready = False

    async def now(self, conn: asyncpg.Connection) -> datetime:
        if not self.test_clock:
            now: datetime = await conn.fetchval("SELECT now()")
            return now
        if not self._ready:
            await create_table(conn)
            self._ready = True
        shifted: datetime = await conn.fetchval(
            f"SELECT now() + make_interval(secs => coalesce((SELECT offset_s FROM {TABLE} WHERE id = 1), 0))")
        return shifted


async def create_table(conn: asyncpg.Connection) -> None:
    """Create the test clock's table (idempotent; two creators racing is harmless)."""
    with contextlib.suppress(asyncpg.UniqueViolationError):  # concurrent CREATE TABLE IF NOT EXISTS on the catalog
        await conn.execute(_CREATE)


async def set_offset(conn: asyncpg.Connection, seconds: float) -> None:
    """Tests: move every test-clock scheduler of this database ``seconds`` ahead of real time."""
    await create_table(conn)
    await conn.execute(f"INSERT INTO {TABLE} (id, offset_s) VALUES (1, $1) "
                       "ON CONFLICT (id) DO UPDATE SET offset_s = EXCLUDED.offset_s", float(seconds))
