"""asyncpg pool with JSON codecs, bounded waits and PgBouncer-safe settings (docs/reliability.md, "Postgres done right").

Behind a transaction-pooling PgBouncer (``pg_transaction_pooling``, case C24) consecutive
transactions of one client connection may run on different server connections, so nothing may
live on a server connection between transactions: asyncpg's statement cache is off
(``statement_cache_size=0``: every query is an unnamed statement, parsed, bound and run within
one protocol round) and no code uses ``prepare()``, session ``SET``, advisory locks or LISTEN on
a pooled connection (LISTEN has its own direct connection, :mod:`threadline.store.listen`).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
import orjson

from threadline.errors import NotConnectedError, ThreadlineError
from threadline.logging import get_logger
from threadline.ops.metrics import PG_ACQUIRE_SECONDS
from threadline.transient import TRANSIENT_PG, is_transient_pg

log = get_logger(__name__)
__all__ = ["TRANSIENT_PG", "Database", "PoolTimeoutError", "connect", "is_transient_pg", "terminate_backend"]

class PoolTimeoutError(ThreadlineError, TimeoutError):
    """No pooled connection became free within the acquire timeout (transient: retried)."""


async def _init_connection(conn: asyncpg.Connection) -> None:
    for typ in ("jsonb", "json"):
        await conn.set_type_codec(typ, encoder=lambda v: orjson.dumps(v).decode(),
                                  decoder=orjson.loads, schema="pg_catalog")


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Release without asyncpg's default reset query (``CLOSE ALL; UNLISTEN *; RESET ALL; SELECT
    pg_advisory_unlock_all()``): one round trip on every release, undoing session state that no
    pooled connection ever has (see the module docstring). asyncpg still rolls back an open
    transaction and drops listeners before calling this."""


def _broken(exc: BaseException) -> bool:
    """True when ``exc`` leaves its connection unusable: asyncpg's own state (``InternalClientError``:
    the protocol left mid-operation; ``InterfaceError``: closed, or another operation in
    progress; not a query argument it could not encode, asyncpg's ``DataError``, a
    ``ValueError``), or a server that refuses writes (``ReadOnlySQLTransactionError``: a standby or
    a demoted primary, which this connection will never leave; decision 209)."""
    if isinstance(exc, asyncpg.exceptions.InternalClientError | asyncpg.exceptions.ReadOnlySQLTransactionError):
        return True
    return isinstance(exc, asyncpg.InterfaceError) and not isinstance(exc, ValueError)


class Database:
    """Owns the connection pool of one process.

    After a failover (decision 209) the pool needs nothing done: the old primary's connections
    are closed by its shutdown, and asyncpg opens a closed one again on its next acquire, trying
    the hosts of a multi-host ``dsn`` in order and keeping the one its ``target_session_attrs``
    accepts (``read-write``: the new primary; :mod:`threadline.store.dsn`). A connection that
    finds its server read-only is terminated, never pooled again.

    Args:
        dsn: libpq URI, with one host or several (``h1:p1,h2:p2``, ``target_session_attrs=read-write``).
        statement_cache: asyncpg's prepared statement cache; ``False`` for transaction pooling.
        transaction_pooling: ``dsn`` is a transaction-pooling PgBouncer (forces the cache off).
        max_size: pool size.
        acquire_timeout_s: longest wait for a connection (then :class:`PoolTimeoutError`, which
            handlers treat as transient and retry).
    """

    def __init__(self, dsn: str, *, statement_cache: bool = True, transaction_pooling: bool = False,
                 max_size: int = 10, acquire_timeout_s: float = 10.0) -> None:
        self._dsn = dsn
        self._statement_cache = statement_cache and not transaction_pooling
        self._transaction_pooling = transaction_pooling
        self._max_size = max_size
        self._acquire_timeout_s = acquire_timeout_s
        self._pool: asyncpg.Pool | None = None
        self.acquire_timeouts = 0
        """Waits for a pooled connection that outlived ``acquire_timeout_s`` (each one is also
        logged as a warning), since the pool was made."""

    async def start(self) -> None:
        if self._pool is not None:
            return
        self._pool = await asyncpg.create_pool(
            self._dsn, min_size=1, max_size=self._max_size, init=_init_connection,
            statement_cache_size=100 if self._statement_cache else 0,
            max_inactive_connection_lifetime=60.0, timeout=self._acquire_timeout_s, reset=_keep_session,
        )
        log.info("postgres pool ready", max_size=self._max_size, statement_cache=self._statement_cache,
                 mode="transaction-pooling" if self._transaction_pooling else "session",
                 acquire_timeout_s=self._acquire_timeout_s)

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

    def pool_sizes(self) -> tuple[int, int, int] | None:
        """``(open, idle, max)`` connections of the pool, or ``None`` before it started."""
        pool = self._pool
        if pool is None:
            return None
        return pool.get_size(), pool.get_idle_size(), self._max_size

    @property
    def max_size(self) -> int:
        """The pool size (connections)."""
        return self._max_size

    @asynccontextmanager
    async def connection(self, *, patient: bool = False) -> AsyncIterator[asyncpg.Connection]:
        """A pooled connection (bounded wait, or with ``patient`` as long as it takes: a wait
        past ``acquire_timeout_s`` is logged and waited again).

        Raises:
            PoolTimeoutError: none became free within ``acquire_timeout_s`` (not ``patient``).
        """
        pool = self.pool
        started = time.perf_counter()
        while True:
            try:
                conn = await pool.acquire(timeout=self._acquire_timeout_s)
                PG_ACQUIRE_SECONDS.observe(time.perf_counter() - started)
                break
            except TimeoutError as exc:
                self.acquire_timeouts += 1
                message = (f"no Postgres connection free within {self._acquire_timeout_s:g} s "
                           f"(pool of {self._max_size})")
                if not patient:
                    log.warning("no Postgres connection in time", reason=message, timeouts=self.acquire_timeouts)
                    raise PoolTimeoutError(message) from exc
                log.warning("still waiting for a Postgres connection", reason=message, timeouts=self.acquire_timeouts)
        try:
            yield conn
        except BaseException as exc:
            if _broken(exc):
                # Never pooled again: the release below only rolls back an open transaction,
                # so a connection stuck mid-operation outside one would go back to the pool.
                log.warning("terminating a broken Postgres connection", error=type(exc).__name__, reason=str(exc))
                conn.terminate()
            raise
        finally:
            await pool.release(conn)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[asyncpg.Connection]:
        """A pooled connection inside a transaction."""
        async with self.connection() as conn, conn.transaction():
            yield conn

    async def fetch(self, query: str, *args: object) -> list[asyncpg.Record]:
        async with self.connection() as conn:
            rows: list[asyncpg.Record] = await conn.fetch(query, *args)
            return rows

    async def fetchrow(self, query: str, *args: object) -> asyncpg.Record | None:
        async with self.connection() as conn:
            return await conn.fetchrow(query, *args)

    async def execute(self, query: str, *args: object) -> str:
        async with self.connection() as conn:
            status: str = await conn.execute(query, *args)
            return status

    async def ping(self) -> bool:
        """Whether PostgreSQL answers ``SELECT 1`` on a pooled connection (a health check; the
        caller bounds the wait)."""
        return await self.fetchrow("SELECT 1 AS one") is not None


async def connect(dsn: str, *, statement_cache: bool = True, timeout_s: float = 10.0) -> asyncpg.Connection:
    """One connection outside the pool (tools, the CLI) with the pool's JSON codecs; pass
    ``statement_cache=settings.pg_use_statement_cache`` so it also works behind a pooler."""
    conn = await asyncpg.connect(dsn, statement_cache_size=100 if statement_cache else 0, timeout=timeout_s)
    await _init_connection(conn)
    return conn


async def terminate_backend(conn: asyncpg.Connection) -> None:
    """Fault injection: make the server end ``conn``'s own session (``pg_terminate_backend``), as
    a crash or a network cut would: this call, or the next one on ``conn``, fails with a connection
    error."""
    await conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")
