"""The processor-worker's :class:`~threadline.runtime.ports.StepStore` on PostgreSQL (the SQL is
in :mod:`threadline.store.steps`): claiming a step and loading what it reads, saving what it
produced with its result in the outbox, and the crash-safety writes in between — every write
fenced by the thread lease."""

from __future__ import annotations

from typing import Any

import asyncpg

from threadline._internal.faults import pause_point, should_fail
from threadline.errors import StaleWriterError
from threadline.events import StepResult
from threadline.logging import get_logger
from threadline.runtime.ports import (
    AbortedRun,
    Begun,
    Busy,
    Claimed,
    Continue,
    Fail,
    RunState,
    Signal,
    Skipped,
    StepInputs,
    StepRecord,
    StepRun,
    Trip,
)
from threadline.store.db import Database
from threadline.store.outbox import Outbox
from threadline.store.steps import (
    StepBusyError,
    begin_attempt,
    has_pending,
    heartbeat,
    load_history,
    mark_drained,
    pending_signals,
    persist_step,
    record_model_output,
    recorded_model_output,
    restart_attempt,
    save_tool_result,
    tool_results,
)
from threadline.topics import Topics
from threadline.transient import is_transient

log = get_logger(__name__)

_STATUS = {"finished": "finished", "failed": "failed", "tripwire": "tripwire"}


def step_run(row: asyncpg.Record) -> StepRun:
    """The :class:`StepRun` view of a ``runs`` row."""
    return StepRun(run_id=row["run_id"], resource_id=row["resource_id"], thread_id=row["thread_id"],
                   agent_id=row["agent_id"], epoch=row["epoch"], step=row["step"], next_seq=row["next_seq"],
                   options=dict(row["options"] or {}), state=RunState.of(row["state"]),
                   stored_state=row["state"])


def _fence(run: StepRun) -> dict[str, Any]:
    """The fields of the run the fenced writes of :mod:`threadline.store.steps` read."""
    return {"run_id": run.run_id, "thread_id": run.thread_id, "resource_id": run.resource_id,
            "epoch": run.epoch, "step": run.step}


class PgStepStore:
    """Steps of this worker (``owner``: its step-owner token) in PostgreSQL.

    Args:
        db: the service's pool.
        outbox: publishes the step results after commit.
        topics: the cluster's topic names.
        owner: this process's step-owner token (``runs.step_owner``).
        lease_ttl_s: seconds each fenced write renews the thread lease for.
    """

    def __init__(self, *, db: Database, outbox: Outbox, topics: Topics, owner: str, lease_ttl_s: float) -> None:
        self._db = db
        self._outbox = outbox
        self._topics = topics
        self._owner = owner
        self._ttl = lease_ttl_s

    async def begin(self, run_id: str, *, step: int, epoch: int, takeover_from: Any = None) -> Begun:
        """See :meth:`threadline.runtime.ports.StepStore.begin`."""
        row = await self._db.fetchrow("SELECT * FROM runs WHERE run_id = $1", run_id)
        if row is not None and row["status"] == "aborted" and not row["terminal_emitted"]:
            return AbortedRun(step_run(row))  # aborted while its step task was in flight
        if row is None or row["status"] != "running" or row["epoch"] != epoch \
                or row["step"] != step or row["steps_done"] > step:
            return Skipped("stale or duplicate step task skipped")
        try:
            async with self._db.transaction() as conn:
                if should_fail("step_first_write", row["thread_id"]):  # the connection resets
                    await conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")
                begun = await begin_attempt(conn, row, self._ttl, owner=self._owner, takeover_from=takeover_from)
        except StaleWriterError:
            begun = None
        except StepBusyError as busy:
            return Busy(busy.heartbeat)
        if begun is None:
            return Skipped("step no longer ours; skipped")
        run = step_run(row)
        inputs = StepInputs(attempt=begun["attempt"], seq_base=begun["seq_base"], restarted=bool(begun["restarted"]))
        async with self._db.connection() as conn:
            if step == 0:
                inputs.history = await load_history(conn, run.thread_id, run_id)
            signals = await pending_signals(conn, run_id)
            if step == 0:  # the first request answers what woke the run; deliveries join at the next boundary
                signals = [sig for sig in signals if sig["mode"] != "deliver"]
            await mark_drained(conn, [sig["id"] for sig in signals], step)
            inputs.signals = [Signal(sig["id"], sig["payload"]) for sig in signals]
            if inputs.restarted:
                inputs.recorded = await recorded_model_output(conn, run_id, step)
        return Claimed(run, inputs)

    async def save(self, record: StepRecord) -> None:
        """See :meth:`threadline.runtime.ports.StepStore.save`."""
        run, outcome = record.run, record.outcome
        error = outcome.error if isinstance(outcome, Fail) else None
        tripwire = outcome.tripwire if isinstance(outcome, Trip) else None
        result = StepResult(run_id=run.run_id, resource_id=run.resource_id, thread_id=run.thread_id, step=run.step,
                            attempt=record.attempt, epoch=run.epoch, outcome=outcome.wire,
                            finish_reason=outcome.finish_reason, text=record.text,
                            usage=record.usage if record.usage is not None else {}, error=error, tripwire=tripwire)
        final_fields: dict[str, Any] | None = None
        if not isinstance(outcome, Continue):
            final_fields = {"status": _STATUS[outcome.wire], "finish_reason": outcome.finish_reason,
                            "error": error}
            if record.usage is not None:  # a step that ran (not one failed before it could)
                final_fields.update(text=record.text, usage=record.usage, tripwire=tripwire)
        async with self._db.transaction() as conn:
            consumed = record.consumed
            if consumed is None:  # what was addressed to the run ends with it; left pending it would wake the next run
                consumed = [r["id"] for r in await pending_signals(conn, run.run_id)]
            box_id = await persist_step(conn, topics=self._topics, run=_fence(run), entries=record.entries,
                                        consumed=consumed, state=record.state, next_seq=record.next_seq,
                                        result=result, final_fields=final_fields, lease_ttl_s=self._ttl)
        await pause_point("after_step_result_stored")
        try:
            await self._outbox.flush([box_id])
        except Exception as exc:
            if not is_transient(exc):
                raise
            # stored and committed: the step is done; the relay publishes its result once Kafka
            # (or Postgres, for the mark) is back. Raising would only retry a step task that
            # finds its step stored.
            log.warning("step result stored; publishing it is left to the outbox relay", run_id=run.run_id,
                        step=run.step, error=repr(exc))

    async def record_model_output(self, run: StepRun, attempt: int, output: dict[str, Any]) -> None:
        """See :meth:`threadline.runtime.ports.StepStore.record_model_output`."""
        async with self._db.transaction() as conn:
            await record_model_output(conn, _fence(run), attempt, output, self._ttl)

    async def restart_attempt(self, run: StepRun, attempt: int, retry_count: int) -> None:
        """See :meth:`threadline.runtime.ports.StepStore.restart_attempt`."""
        async with self._db.transaction() as conn:
            await restart_attempt(conn, run.run_id, run.thread_id, run.epoch, run.step, attempt=attempt,
                                  retry_count=retry_count)

    async def tool_results(self, run: StepRun, call_ids: list[str]) -> dict[str, tuple[Any, str | None]]:
        """See :meth:`threadline.runtime.ports.StepStore.tool_results`."""
        async with self._db.connection() as conn:
            return await tool_results(conn, run.run_id, call_ids)

    async def save_tool_result(self, run: StepRun, call_id: str, tool_name: str, result: Any,
                               error: str | None) -> None:
        """See :meth:`threadline.runtime.ports.StepStore.save_tool_result`."""
        async with self._db.connection() as conn:
            await save_tool_result(conn, run.run_id, call_id, tool_name, result, error)

    async def still_owner(self, run: StepRun, attempt: int) -> bool:
        """See :meth:`threadline.runtime.ports.StepStore.still_owner`."""
        async with self._db.connection() as conn:
            return await heartbeat(conn, run.run_id, self._owner, attempt)

    async def more_pending(self, run: StepRun, exclude: list[str]) -> bool:
        """See :meth:`threadline.runtime.ports.StepStore.more_pending`."""
        async with self._db.connection() as conn:
            return await has_pending(conn, run.run_id, exclude)


