"""Transient Postgres faults are retried with backoff (tenacity, in
``kafka.handling.guarded``), the others are dead-lettered at once; pool waits are bounded."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import pytest

from threadline.kafka.consumer import Record
from threadline.kafka.handling import guarded, is_transient
from threadline.store.db import Database, PoolTimeoutError


@pytest.mark.parametrize("exc", [
    asyncpg.exceptions.AdminShutdownError("terminating connection due to administrator command"),
    asyncpg.exceptions.CannotConnectNowError("the database system is starting up"),
    asyncpg.exceptions.CrashShutdownError("crash"),
    asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
    asyncpg.exceptions.ConnectionFailureError("connection failure"),
    asyncpg.exceptions.TooManyConnectionsError("too many clients"),
    asyncpg.exceptions.SerializationError("could not serialize access"),
    asyncpg.exceptions.DeadlockDetectedError("deadlock"),
    asyncpg.InterfaceError("connection is closed"),
    asyncpg.exceptions.InternalClientError("cannot switch to state 12; another operation (2) is in progress"),
    asyncpg.exceptions.IdleSessionTimeoutError("terminating connection due to idle-session timeout"),
    asyncpg.exceptions.IdleInTransactionSessionTimeoutError("terminating connection due to idle-in-transaction"),
    ConnectionResetError("reset by peer"),
    PoolTimeoutError("no connection free"),
])
def test_connection_faults_are_transient(exc):
    assert is_transient(exc)


@pytest.mark.parametrize("exc", [
    asyncpg.exceptions.UniqueViolationError("duplicate key"),
    asyncpg.exceptions.PostgresSyntaxError("syntax error"),
    asyncpg.exceptions.DataError("invalid input"),
    asyncpg.exceptions.QueryCanceledError("canceling statement due to user request"),
    ValueError("bad"),
])
def test_other_faults_are_not(exc):
    assert not is_transient(exc)


@dataclass
class _Letters:
    written: list[tuple[str, str]] = field(default_factory=list)

    async def write(self, record: Any, *, code: str, reason: str, request_id: str | None = None) -> None:
        self.written.append((code, reason))


def _record() -> Record:
    from aiokafka.structs import ConsumerRecord

    return ConsumerRecord(topic="t", partition=0, offset=1, timestamp=0, timestamp_type=0, key=b"k", value=b"{}",
                          checksum=None, serialized_key_size=1, serialized_value_size=2, headers=[])


async def test_a_terminated_backend_mid_handler_is_retried_and_succeeds(cluster):
    """The handler's first attempt loses its backend (pg_terminate_backend): AdminShutdownError is
    retried with backoff, the second attempt commits; nothing is dead-lettered."""
    admin = await asyncpg.connect(cluster.dsn)
    await admin.execute("CREATE TABLE IF NOT EXISTS transient_probe (n int)")
    attempts = 0
    async with Database(cluster.dsn, max_size=2) as db:
        async def handler(_record: Record) -> None:
            nonlocal attempts
            attempts += 1
            async with db.transaction() as conn:
                if attempts == 1:
                    await admin.execute("SELECT pg_terminate_backend($1)", conn.get_server_pid())
                await conn.execute("INSERT INTO transient_probe VALUES ($1)", attempts)

        letters = _Letters()
        await guarded(handler, letters)(_record())  # type: ignore[arg-type]  # a stand-in dead-letter writer
    assert attempts == 2 and letters.written == []
    assert await admin.fetchval("SELECT array_agg(n) FROM transient_probe") == [2]
    await admin.execute("DROP TABLE transient_probe")
    await admin.close()


async def test_a_connection_left_mid_operation_is_terminated_not_pooled_again(cluster):
    """A handler's connection raises InternalClientError (its protocol state left mid-operation,
    asyncpg #1069): it is retried, and the retry gets a new backend, never the broken one (the pool
    releases without a reset query, so nothing else would notice the state)."""
    attempts: list[tuple[int, bool]] = []
    async with Database(cluster.dsn, max_size=1) as db:
        async def handler(_record: Record) -> None:
            async with db.transaction() as conn:
                attempts.append((conn.get_server_pid(), False))
                if len(attempts) == 1:
                    raise asyncpg.exceptions.InternalClientError(
                        "cannot switch to state 12; another operation (2) is in progress")
                await conn.execute("SELECT 1")

        letters = _Letters()
        await guarded(handler, letters)(_record())  # type: ignore[arg-type]  # a stand-in dead-letter writer
        assert len(attempts) == 2 and letters.written == []
        assert attempts[0][0] != attempts[1][0]  # a new connection, the broken one terminated
        async with db.connection() as conn:
            assert conn.get_server_pid() == attempts[1][0]  # a healthy one is pooled again


async def test_a_backend_terminated_mid_statement_leaves_the_pool_usable(cluster):
    """The backend is terminated while a statement runs on a pooled connection (a server restart
    as one connection sees it): the handler is retried and the pool's next use works."""
    admin = await asyncpg.connect(cluster.dsn)
    attempts = 0
    async with Database(cluster.dsn, max_size=1) as db:
        async def handler(_record: Record) -> None:
            nonlocal attempts
            attempts += 1
            async with db.transaction() as conn:
                if attempts == 1:
                    pid = conn.get_server_pid()
                    sleeper = asyncio.ensure_future(conn.execute("SELECT pg_sleep(30)"))
                    while not await admin.fetchval(
                            "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND query LIKE '%pg_sleep%'"
                            " AND state = 'active'", pid):
                        await asyncio.sleep(0.02)
                    await admin.execute("SELECT pg_terminate_backend($1)", pid)
                    await sleeper
                await conn.execute("SELECT 1")

        letters = _Letters()
        await guarded(handler, letters)(_record())  # type: ignore[arg-type]  # a stand-in dead-letter writer
        assert attempts == 2 and letters.written == []
        assert await db.fetchrow("SELECT 1 AS one") is not None
    await admin.close()


async def test_a_constraint_violation_is_dead_lettered_without_retry(cluster):
    attempts = 0
    async with Database(cluster.dsn, max_size=1) as db:
        async def handler(_record: Record) -> None:
            nonlocal attempts
            attempts += 1
            await db.execute("SELECT 1/0")

        letters = _Letters()
        await guarded(handler, letters)(_record())  # type: ignore[arg-type]  # a stand-in dead-letter writer
    assert attempts == 1
    assert letters.written[0][0] == "handler_failed" and "DivisionByZero" in letters.written[0][1]


async def test_pool_waits_are_bounded(cluster):
    async with Database(cluster.dsn, max_size=1, acquire_timeout_s=0.5) as db:
        async with db.connection():
            started = time.monotonic()
            with pytest.raises(PoolTimeoutError, match=r"no Postgres connection free within 0\.5 s"):
                async with db.connection():
                    pass
            assert time.monotonic() - started < 30  # it ends (generous: a loaded machine)
            assert db.acquire_timeouts == 1  # counted (and logged)
        assert await db.fetchrow("SELECT 1 AS one") is not None  # the pool goes on once it is free
        assert db.acquire_timeouts == 1
