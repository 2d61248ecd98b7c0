"""The workflow journal in PostgreSQL (table ``workflow_steps``, migration 0024; decisions 80–83):
one row per workflow step of a tool call, written before the next step starts, each write fenced
by the step's ownership (the worker's owner token, the attempt, the thread lease) so a worker
that lost the step records nothing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

import asyncpg
from tenacity import AsyncRetrying, retry_if_exception, stop_after_delay, wait_exponential

from threadline.logging import get_logger
from threadline.runtime.workflows import Entry, JournalUnavailableError, WorkflowFencedError
from threadline.store.steps import _FENCE  # the one definition of a fenced step write
from threadline.transient import is_transient

log = get_logger(__name__)

T = TypeVar("T")

JOURNAL_RETRY_S = 60.0
"""How long a journal write is retried through a transient PostgreSQL fault before the step is
handed back (:class:`~threadline.runtime.workflows.JournalUnavailableError`)."""

_OWNED = (f"EXISTS (SELECT 1 FROM runs WHERE runs.run_id = $1 AND runs.step_owner = $4 AND runs.attempt = $5 "
          f"AND {_FENCE})")

_START = ("INSERT INTO workflow_steps (run_id, tool_call_id, path, status, attempt, runs) "
          f"SELECT $1, $2, $3, 'running', $5, 1 WHERE {_OWNED} "
          "ON CONFLICT (run_id, tool_call_id, path) DO UPDATE SET status = 'running', attempt = EXCLUDED.attempt, "
          "runs = workflow_steps.runs + 1, updated_at = now() WHERE workflow_steps.status = 'running' "
          "RETURNING true")

_END = ("INSERT INTO workflow_steps (run_id, tool_call_id, path, status, attempt, runs, output, error) "
        f"SELECT $1, $2, $3, $6, $5, 0, $7, $8 WHERE {_OWNED} "
        "ON CONFLICT (run_id, tool_call_id, path) DO UPDATE SET status = EXCLUDED.status, output = EXCLUDED.output, "
        "error = EXCLUDED.error, attempt = EXCLUDED.attempt, updated_at = now() "
        "WHERE workflow_steps.status = 'running' RETURNING true")


async def load_steps(conn: asyncpg.Connection, run_id: str, tool_call_id: str) -> dict[str, Entry]:
    """The recorded steps of a workflow's tool call, by path."""
    rows = await conn.fetch("SELECT path, status, output, error FROM workflow_steps "
                            "WHERE run_id = $1 AND tool_call_id = $2", run_id, tool_call_id)
    return {r["path"]: Entry(r["status"], r["output"], r["error"]) for r in rows}


async def start_step(conn: asyncpg.Connection, run_id: str, tool_call_id: str, path: str, *, owner: str,
                     attempt: int) -> bool:
    """Record ``path`` as running under ``attempt`` (a new row, or a ``running`` one a crashed
    attempt left); False when the step is not owned (or the path already ended)."""
    return await conn.fetchval(_START, run_id, tool_call_id, path, owner, attempt) is not None


async def end_step(conn: asyncpg.Connection, run_id: str, tool_call_id: str, path: str, *, owner: str,
                   attempt: int, status: str, output: Any, error: str | None) -> bool:
    """Record ``path``'s end; False when the step is not owned (or the path already ended)."""
    return await conn.fetchval(_END, run_id, tool_call_id, path, owner, attempt, status, output,
                               error) is not None


class PgJournal:
    """The :class:`~threadline.runtime.workflows.Journal` of one workflow tool call of one step
    attempt.

    Args:
        connection: ``() -> async context manager`` yielding a pooled connection (the step store's).
        run_id, tool_call_id: whose steps.
        owner: the worker's step-owner token; attempt: the step attempt executing.
    """

    def __init__(self, connection: Callable[[], AbstractAsyncContextManager[asyncpg.Connection]], *,
                 run_id: str, epoch: int, tool_call_id: str, owner: str, attempt: int) -> None:
        self._conn = connection
        self._run_id, self._epoch, self._call = run_id, epoch, tool_call_id
        self._owner, self._attempt = owner, attempt

    async def _with_retry(self, op: Callable[[asyncpg.Connection], Awaitable[T]], where: str = "") -> T:
        """``op`` on a pooled connection, retried through transient PostgreSQL faults for
        :data:`JOURNAL_RETRY_S`; a transient fault that outlasts them is raised as
        :class:`~threadline.runtime.workflows.JournalUnavailableError` (``where`` names the write)."""
        try:
            async for attempt in AsyncRetrying(retry=retry_if_exception(is_transient), reraise=True,
                                               stop=stop_after_delay(JOURNAL_RETRY_S),
                                               wait=wait_exponential(multiplier=0.1, max=2.0)):
                with attempt:
                    async with self._conn() as conn:
                        return await op(conn)
        except Exception as exc:
            if is_transient(exc):
                raise JournalUnavailableError(f"workflow journal unreachable{where}: {exc!r}") from exc
            raise
        raise AssertionError("unreachable")  # pragma: no cover - AsyncRetrying returns or raises

    async def _write(self, what: str, fn: Callable[..., Any], path: str, **kw: Any) -> None:
        written = await self._with_retry(
            lambda conn: fn(conn, self._run_id, self._call, path, owner=self._owner, attempt=self._attempt, **kw),
            f" ({what} {path})")
        if not written:
            # a later attempt of ours may have ended the path: still fenced, we are not its owner
            log.warning("workflow step write fenced", run_id=self._run_id, tool_call_id=self._call, path=path,
                        what=what, attempt=self._attempt)
            raise WorkflowFencedError(self._run_id, self._epoch)

    async def load(self) -> dict[str, Entry]:
        return await self._with_retry(lambda conn: load_steps(conn, self._run_id, self._call))

    async def start(self, path: str) -> None:
        await self._write("start", start_step, path)

    async def end(self, path: str, status: str, output: Any, error: str | None) -> None:
        await self._write("end", end_step, path, status=status, output=output, error=error)
