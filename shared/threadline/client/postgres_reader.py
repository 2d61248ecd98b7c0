"""The client's reads from PostgreSQL (the read model the services write), in one class.

:class:`~threadline.client.kafka_transport.KafkaTransport` reads through it when it is given a
DSN and no other reader; every read opens one connection and closes it (a client reads rarely).
Every statement is the store's (:mod:`threadline.store.queries`, the read model the gateway and
the CLI read too; :mod:`threadline.store.inbox_access`; :mod:`threadline.store.scores`); times
come back as ISO-8601 text, as the gateway answers them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from threadline.client.transport import ReadName, query_of
from threadline.events.rows import AgentDetails, InboxRecord, MessageRow, RunRow, ScoreRow, ThreadDetails, ThreadSummary
from threadline.store import inbox_access as access
from threadline.store import queries
from threadline.store.db import connect
from threadline.store.scores import list_scores


def _thread(row: ThreadSummary[datetime]) -> ThreadSummary[str]:
    """The row with its times as ISO-8601 text (what the gateway answers)."""
    return {**row, "created_at": row["created_at"].isoformat(), "updated_at": row["updated_at"].isoformat()}


def _message(row: MessageRow[datetime]) -> MessageRow[str]:
    """The row with its time as ISO-8601 text (what the gateway answers)."""
    return {**row, "created_at": row["created_at"].isoformat()}


def _run(row: RunRow[datetime]) -> RunRow[str]:
    """The row with its times as ISO-8601 text (what the gateway answers)."""
    finished_at = row["finished_at"]
    return {**row, "created_at": row["created_at"].isoformat(),
            "finished_at": None if finished_at is None else finished_at.isoformat()}


class PostgresReader:
    """Reads by name (:data:`~threadline.client.transport.ReadName`) over short connections.

    Args:
        dsn: the cluster's PostgreSQL (``THREADLINE_PG_DSN``).
        statement_cache: ``False`` behind a transaction-pooling PgBouncer.

    Raises (every read): ``asyncpg`` / ``OSError`` errors when PostgreSQL cannot be reached.
    """

    def __init__(self, dsn: str, *, statement_cache: bool = True) -> None:
        self._dsn = dsn
        self._statement_cache = statement_cache

    def __repr__(self) -> str:  # never the DSN's password
        return "PostgresReader()"

    async def read(self, name: ReadName, /, **params: object) -> Any:
        """The answer of read ``name`` (:data:`~threadline.client.transport.ReadName`).

        Raises:
            ValueError: an unknown read, or ``mark`` with a status other than seen / dismissed / archived.
        """
        query = query_of(self, name)
        conn = await connect(self._dsn, statement_cache=self._statement_cache)
        try:
            return await query(conn, **params)
        finally:
            await conn.close()

    async def close(self) -> None:
        """Nothing is held between reads."""

    # --- one method per read (conn first, the read's parameters as keywords) -------------------
    @staticmethod
    async def _active_run(conn: queries.Conn, *, resource_id: str, thread_id: str) -> str | None:
        return await queries.active_run(conn, resource_id=resource_id, thread_id=thread_id)

    @staticmethod
    async def _agent(conn: queries.Conn, *, agent_id: str) -> AgentDetails | None:
        return await queries.read_agent(conn, agent_id)

    @staticmethod
    async def _thread(conn: queries.Conn, *, resource_id: str, thread_id: str) -> ThreadDetails | None:
        return await queries.read_thread(conn, resource_id, thread_id)

    @staticmethod
    async def _threads(conn: queries.Conn, *, resource_id: str, limit: int = 100) -> list[ThreadSummary[str]]:
        return [_thread(r) for r in await queries.list_threads(conn, resource_id=resource_id,
                                                             limit=max(1, min(limit, 1000)))]

    @staticmethod
    async def _messages(conn: queries.Conn, *, resource_id: str, thread_id: str) -> list[MessageRow[str]]:
        return [_message(r) for r in await queries.list_messages(conn, resource_id=resource_id, thread_id=thread_id)]

    @staticmethod
    async def _runs(conn: queries.Conn, *, resource_id: str, thread_id: str) -> list[RunRow[str]]:
        return [_run(r) for r in await queries.list_runs(conn, resource_id=resource_id, thread_id=thread_id)]

    @staticmethod
    async def _scores(conn: queries.Conn, *, run_id: str) -> list[ScoreRow]:
        return await list_scores(conn, run_id)

    @staticmethod
    async def _inbox(conn: queries.Conn, *, resource_id: str, thread_id: str, status: str | None = None) -> list[InboxRecord]:
        return await access.list_records(conn, resource_id=resource_id, thread_id=thread_id, status=status)

    @staticmethod
    async def _notification(conn: queries.Conn, *, resource_id: str, thread_id: str, record_id: str) -> InboxRecord | None:
        return await access.read_record(conn, resource_id=resource_id, thread_id=thread_id, record_id=record_id)

    @staticmethod
    async def _mark(conn: queries.Conn, *, resource_id: str, thread_id: str, record_id: str,
                    status: str) -> InboxRecord | None:
        return await access.mark(conn, resource_id=resource_id, thread_id=thread_id, record_id=record_id,
                                 status=status)
