"""Fixtures of the integration tests beside those of ``tests/conftest.py``."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator

import asyncpg
import pytest

from threadline.store.db import Database, connect
from threadline.testing.harness import create_database, drop_database


@pytest.fixture
def fresh_db(cluster) -> Iterator[str]:
    """The DSN of an empty database of the test's own (not migrated), dropped after it."""
    name = f"tl_mig_{uuid.uuid4().hex[:8]}"
    yield asyncio.run(create_database(cluster.admin_dsn, name))
    asyncio.run(drop_database(cluster.admin_dsn, name))


@pytest.fixture
async def readers(cluster) -> AsyncIterator[tuple[Database, asyncpg.Connection]]:
    """A started pool and one plain connection on the test database, closed after the test."""
    db = Database(cluster.dsn)
    await db.start()
    conn = await connect(cluster.dsn)
    try:
        yield db, conn
    finally:
        await conn.close()
        await db.stop()
