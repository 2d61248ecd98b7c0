"""The workflow journal in PostgreSQL (decisions 80–83): the runtime's
:class:`~threadline.runtime.workflows.Journal` port over the ``workflow_steps`` rows of
:mod:`threadline.store.workflow_steps`, each write retried through transient faults and fenced by
the step's ownership, so a worker that lost the step records nothing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

import asyncpg

from threadline.logging import get_logger
from threadline.runtime.workflow_journal import Entry
from threadline.runtime.workflows import JournalUnavailableError, WorkflowFencedError
from threadline.store.workflow_steps import end_step, load_steps, start_step
from threadline.transient import STORE_BACKOFF, is_transient, retrying

log = get_logger(__name__)

T = TypeVar("T")

JOURNAL_RETRY_S = 60.0
"""How long a journal write is retried through a transient PostgreSQL fault before the step is
handed back (:class:`~threadline.runtime.workflows.JournalUnavailableError`)."""

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
        :data:`JOURNAL_RETRY_S` with the waits of :data:`~threadline.transient.STORE_BACKOFF`; a
        transient fault that outlasts them is raised as
        :class:`~threadline.runtime.workflows.JournalUnavailableError` (``where`` names the write)."""
        try:
            async for attempt in retrying(STORE_BACKOFF, for_s=JOURNAL_RETRY_S):
                with attempt:
                    async with self._conn() as conn:
                        return await op(conn)
        except Exception as exc:
            if is_transient(exc):
                raise JournalUnavailableError(f"workflow journal unreachable{where}: {exc!r}") from exc
            raise
        raise AssertionError("unreachable")  # pragma: no cover - the retry loop returns or raises

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
        rows = await self._with_retry(lambda conn: load_steps(conn, self._run_id, self._call))
        return {path: Entry(*row) for path, row in rows.items()}

    async def start(self, path: str) -> None:
        await self._write("start", start_step, path)

    async def end(self, path: str, status: str, output: object, error: str | None) -> None:
        await self._write("end", end_step, path, status=status, output=output, error=error)
