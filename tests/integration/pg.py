"""What the store's integration tests share: the rows they start from (a thread, its lease and a
run holding it) and the statements a block sends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg


async def leased_run(conn: asyncpg.Connection, *, run_id: str, thread_id: str, resource_id: str, epoch: int = 3,
                     agent_id: str = "agent", **columns: Any) -> None:
    """Insert the thread ``(resource_id, thread_id)``, its lease held by ``run_id`` at ``epoch`` for
    another minute, and the run's row with ``columns`` (any other ``runs`` column, by name; the
    table's defaults for the rest)."""
    await conn.execute("INSERT INTO threads (thread_id, resource_id) VALUES ($1, $2)", thread_id, resource_id)
    await conn.execute("INSERT INTO thread_leases (thread_id, resource_id, run_id, epoch, expires_at) "
                       "VALUES ($1, $2, $3, $4, now() + interval '1 minute')", thread_id, resource_id, run_id, epoch)
    names = ["run_id", "thread_id", "resource_id", "agent_id", "epoch", *columns]
    values = [run_id, thread_id, resource_id, agent_id, epoch, *columns.values()]
    marks = ", ".join(f"${i}" for i in range(1, len(names) + 1))
    await conn.execute(f"INSERT INTO runs ({', '.join(names)}) VALUES ({marks})", *values)


@asynccontextmanager
async def statements(conn: asyncpg.Connection) -> AsyncIterator[list[str]]:
    """The text of each statement sent on ``conn`` inside the block (asyncpg's query logger), in
    order; complete once the block exits."""
    sent: list[str] = []

    def log(query: Any) -> None:
        sent.append(query.query)

    conn.add_query_logger(log)
    try:
        yield sent
    finally:
        await asyncio.sleep(0.01)  # the loggers are called soon after each statement, not within it
        conn.remove_query_logger(log)
