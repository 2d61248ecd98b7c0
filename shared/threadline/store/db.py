"""asyncpg pool with JSON codecs, bounded waits and PgBouncer-safe settings."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import orjson

from threadline.errors import NotConnectedError
from threadline.logging import get_logger

log = get_logger(__name__)


async def _init_connection(conn: asyncpg.Connection) -> None:
    for typ in ("jsonb", "json"):
        await conn.set_type_codec(typ, encoder=lambda v: orjson.dumps(v).decode(),
                                  decoder=orjson.loads, schema="pg_catalog")


class Database:
    """Owns the connection pool of one process.

    Args:
        dsn: libpq URI.
        statement_cache: asyncpg's prepared statement cache; ``False`` for transaction pooling.
        max_size: pool size.
        acquire_timeout_s: longest wait for a connection (then ``asyncio.TimeoutError``, which
            handlers treat as transient and retry).
    """

    def __init__(self, dsn: str, *, statement_cache: bool = True, max_size: int = 10,
                 acquire_timeout_s: float = 10.0) -> None:
        self._dsn = dsn
        self._statement_cache = statement_cache
        self._max_size = max_size
        self._acquire_timeout_s = acquire_timeout_s
        self._pool: asyncpg.Pool | None = None

    async def start(self) -> None:
        if self._pool is not None:
            return
        self._pool = await asyncpg.create_pool(
            self._dsn, min_size=1, max_size=self._max_size, init=_init_connection,
            statement_cache_size=100 if self._statement_cache else 0,
            max_inactive_connection_lifetime=60.0,
        )
        log.info("postgres pool ready", max_size=self._max_size,
                 statement_cache=self._statement_cache)

    async def stop(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    async def __aenter__(self) -> Database:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise NotConnectedError("database not started")
        return self._pool

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[asyncpg.Connection]:
        """A pooled connection (bounded wait)."""
        async with self.pool.acquire(timeout=self._acquire_timeout_s) as conn:
            yield conn

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[asyncpg.Connection]:
        """A pooled connection inside a transaction."""
        async with self.connection() as conn, conn.transaction():
            yield conn

    async def fetch(self, query: str, *args: Any) -> list[asyncpg.Record]:
        async with self.connection() as conn:
            return await conn.fetch(query, *args)

    async def fetchrow(self, query: str, *args: Any) -> asyncpg.Record | None:
        async with self.connection() as conn:
            return await conn.fetchrow(query, *args)

    async def execute(self, query: str, *args: Any) -> str:
        async with self.connection() as conn:
            return await conn.execute(query, *args)
