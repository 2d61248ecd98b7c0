"""The processor-worker's :class:`~threadline.runtime.step.ports.StepStore` on PostgreSQL (the SQL is
in :mod:`threadline.store.steps`): claiming a step and loading what it reads, saving what it
produced with its result in the outbox, and the crash-safety writes in between — every write
fenced by the thread lease."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager, nullcontext
from dataclasses import replace
from typing import Any

import asyncpg
import orjson

from threadline._internal.faults import pause_point, should_fail
from threadline.events import StepResult
from threadline.events.chunk_types import ToolCallPayload
from threadline.events.chunks import chunk_headers, nested_chunk
from threadline.events.codec import encode
from threadline.flows.orchestration import lifecycle_event
from threadline.flows.publish import Outbox, OutboxNotAcknowledgedError
from threadline.logging import get_logger
from threadline.orchestration.children import nested_target
from threadline.orchestration.runs import AnnounceStored, RunRow, SavePlan, plan_save
from threadline.runtime.step.ports import (
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
    Suspend,
    Trip,
)
from threadline.store.approvals import answers, record_approval_requests
from threadline.store.db import Database, terminate_backend
from threadline.store.outbox import Queued, add_raw, queued
from threadline.store.steps import (
    Announcement,
    Saved,
    begin_step,
    has_pending,
    heartbeat,
    history_of,
    record_model_output,
    restart_attempt,
    save_step,
    save_tool_result,
    tool_results,
)
from threadline.store.sub_agents import record_child_requests
from threadline.topics import Topics, thread_key
from threadline.transient import STORE_BACKOFF, is_transient, retrying
from threadline.worker.journal import PgJournal

log = get_logger(__name__)

RESERVED_CONNECTIONS = 3
"""Pool connections step operations leave to the rest of the worker (keep-alive, outbox marks and
relay, aborts)."""

_STATUS = {"finished": "finished", "failed": "failed", "tripwire": "tripwire"}


def step_run(row: asyncpg.Record, run_id: str) -> StepRun:
    """The :class:`StepRun` view of the run columns of a ``begin_step`` row."""
    return StepRun(run_id=run_id, resource_id=row["resource_id"], thread_id=row["thread_id"],
                   agent_id=row["agent_id"], epoch=row["epoch"], step=row["step"], next_seq=row["next_seq"],
                   options=dict(row["options"] or {}), state=RunState.of(row["state"]), stored_state=row["state"])


def _begun(row: asyncpg.Record, run_id: str) -> Begun:
    """What a ``threadline_begin_step`` row means for the worker."""
    outcome = row["outcome"]
    if outcome == "skipped":
        return Skipped("stale or duplicate step task skipped")
    if outcome == "stale":
        return Skipped("step no longer ours; skipped")
    if outcome == "busy":
        return Busy(row["heartbeat"])
    run = step_run(row, run_id)
    if outcome == "aborted":
        return AbortedRun(run)  # aborted while its step task was in flight
    inputs = StepInputs(attempt=row["attempt"], seq_base=row["seq_base"], restarted=bool(row["restarted"]),
                        history=history_of(row) if row["step"] == 0 else [],
                        signals=[Signal(sig["id"], sig["payload"]) for sig in row["signals"] or []],
                        recorded=row["recorded"], overrides=row.get("overrides"))
    return Claimed(run, inputs)


def _claimed_next(record: StepRecord, saved: Saved, state_json: bytes) -> Claimed:
    """The run's next step as the save claimed it for this worker: step + 1, attempt 1, its chunks
    from the stored ``next_seq``, and the state as this worker just stored it, its own objects
    (decision 102), so nothing of the run is read back."""
    run = record.run
    nxt = replace(run, step=run.step + 1, next_seq=record.next_seq, options=dict(run.options),
                  state=RunState.carried(record.state), stored_state=None, stored_json=state_json)
    inputs = StepInputs(attempt=1, seq_base=record.next_seq, restarted=False, history=[],
                        signals=[Signal(sig["id"], sig["payload"]) for sig in saved.signals], recorded=None)
    return Claimed(nxt, inputs)


def _fence(run: StepRun) -> dict[str, Any]:
    """The fields of the run the fenced writes of :mod:`threadline.store.steps` read."""
    return {"run_id": run.run_id, "thread_id": run.thread_id, "resource_id": run.resource_id,
            "epoch": run.epoch, "step": run.step}


def announcement(run: StepRun, plan: AnnounceStored, topic: str, own: list[int]) -> Announcement:
    """The lifecycle records of ``plan`` (the run's start, then ``step_finished``), for ``topic``
    (the lifecycle topic), that the save queues in place of ``run``'s step result when the row is
    as the plan assumed (decision 103). ``own``: see :class:`~threadline.store.steps.Announcement`."""
    ids = {"resource_id": run.resource_id, "thread_id": run.thread_id, "run_id": run.run_id, "agent_id": run.agent_id}
    events = [lifecycle_event(kind, ids) for kind in plan.start]
    events.append(lifecycle_event("step_finished", ids, step=plan.finished_step))
    return Announcement(topic=topic, records=[encode(e) for e in events], start_rows=len(plan.start),
                        applied=plan.applied, own=own)


def step_result(record: StepRecord) -> StepResult:
    """The step result of ``record``, for the orchestrator."""
    run, outcome = record.run, record.outcome
    return StepResult(run_id=run.run_id, resource_id=run.resource_id, thread_id=run.thread_id, step=run.step,
                      attempt=record.attempt, epoch=run.epoch, outcome=outcome.wire,
                      finish_reason=outcome.finish_reason, text=record.text,
                      usage=record.usage if record.usage is not None else {},
                      error=outcome.error if isinstance(outcome, Fail) else None,
                      tripwire=outcome.tripwire if isinstance(outcome, Trip) else None)


def final_fields(record: StepRecord) -> dict[str, Any] | None:
    """The run's columns a step that ends it stores (``None``: the run goes on)."""
    outcome = record.outcome
    if isinstance(outcome, Continue | Suspend):
        return None
    fields: dict[str, Any] = {"status": _STATUS[outcome.wire], "finish_reason": outcome.finish_reason,
                              "error": outcome.error if isinstance(outcome, Fail) else None}
    if record.usage is not None:  # a step that ran (not one failed before it could)
        fields.update(text=record.text, usage=record.usage,
                      tripwire=outcome.tripwire if isinstance(outcome, Trip) else None)
    return fields


_OWN_KEPT = 8
"""Lifecycle rows of a run a worker remembers as its own (those not yet marked published do not
stop its next announcement; decision 103)."""
_OWN_RUNS = 10_000
"""Runs whose own lifecycle rows a worker remembers at most."""

TOOL_RESULT_RETRY_S = 60.0
"""How long a worker retries storing a tool's result through a transient PostgreSQL fault (a
restart takes seconds) before it hands the step back and the tool runs again on re-execution."""


class PgStepStore:
    """Steps of this worker (``owner``: its step-owner token) in PostgreSQL.

    Args:
        db: the service's pool.
        outbox: publishes the step results after commit.
        topics: the cluster's topic names.
        owner: this process's step-owner token (``runs.step_owner``).
        lease_ttl_s: seconds each fenced write renews the thread lease for.
        connections: most connections the steps hold at once (default: the pool's size less the
            reserved ones).
        on_saved: called with the run id as soon as a step's end is committed, before its result
            is published (the keep-alive stops beating it: a beat after the save would find the
            heartbeat cleared and report the step taken over).
        continues: the worker plans each save by the orchestrator's rule
            (:func:`~threadline.orchestration.runs.plan_save`, decision 106): a step whose next
            step the orchestrator would schedule is stored with that step claimed for this
            worker (:meth:`take_next` hands it out) and, where the orchestrator would then only
            announce the stored step, announced by the same statement. Its result (or
            announcement) is published in the background while the next step runs (decision 37).
            Off: every step is only stored and goes through the orchestrator
            (``THREADLINE_WORKER_CONTINUES=0``; :meth:`stop_continuing` at shutdown).
        history_limit: most stored messages step 0 reads (the largest ``last_messages`` of the
            agents; each run then keeps its agent's last ``last_messages``).
    """

    def __init__(self, *, db: Database, outbox: Outbox, topics: Topics, owner: str, lease_ttl_s: float,
                 connections: int | None = None, on_saved: Callable[[str], None] | None = None,
                 continues: bool = False, history_limit: int = 200) -> None:
        self._db = db
        self._own: dict[str, list[int]] = {}  # run -> its lifecycle rows this worker queued lately
        self._history_limit = history_limit
        self.continues = continues
        self._next: dict[str, Claimed] = {}
        self._publishing: dict[str, asyncio.Task[None]] = {}  # run -> its last result's background publish
        # run -> (saved, published, statement sent, statement returned) of its last continued step
        self._times: dict[str, tuple[float, float, float, float]] = {}
        self._relayed: set[str] = set()  # runs whose step result was left to the relay (keeps their order)
        self._on_saved = on_saved
        self._outbox = outbox
        self._topics = topics
        self._owner = owner
        self._ttl = lease_ttl_s
        self._slots = asyncio.Semaphore(connections or max(1, db.max_size - RESERVED_CONNECTIONS))

    @asynccontextmanager
    async def _conn(self) -> AsyncIterator[asyncpg.Connection]:
        """A pooled connection for one step operation. At most ``connections`` step operations
        hold one at a time (default: the pool less :data:`RESERVED_CONNECTIONS`, left to the
        keep-alive, the outbox and aborts); the others wait their turn without a deadline: a
        step waiting for a connection is delayed, never failed nor re-executed."""
        async with self._slots, self._db.connection(patient=True) as conn:
            yield conn

    async def begin(self, run_id: str, *, step: int, epoch: int, takeover_from: object = None,
                    thread_id: str = "") -> Begun:
        """See :meth:`threadline.runtime.step.ports.StepStore.begin`: one statement, one round trip
        (:func:`threadline.store.steps.begin_step`). ``thread_id`` (the step task's) only
        selects the fault-injection point ``step_first_write``. A task of a step that a worker
        continued claims the run's current step (the task stands for the chain, decision 32)."""
        async with self._conn() as conn:
            if should_fail("step_first_write", thread_id):  # the connection resets before the claim
                await terminate_backend(conn)
            row = await begin_step(conn, run_id, step=step, epoch=epoch, owner=self._owner, lease_ttl_s=self._ttl,
                                   takeover_from=takeover_from, history_limit=self._history_limit)
        return _begun(row, run_id)

    def take_next(self, run_id: str) -> Claimed | None:
        """The run's next step, claimed by this worker when it stored the last one (``continues``),
        once: the caller runs it (or, when it cannot, leaves it to the heartbeat's takeover)."""
        return self._next.pop(run_id, None)

    def take_times(self, run_id: str) -> tuple[float, float, float, float] | None:
        """``(saved, published, sent, returned)``: the ``time.perf_counter()`` readings of the
        run's last step stored with its next step claimed (:mod:`threadline.worker.step_gap`;
        ``sent``/``returned``: the save-and-claim statement sent on a connection in hand, and
        returned), once."""
        return self._times.pop(run_id, None)

    async def settle(self, run_id: str) -> None:
        """Wait until the run's last step result published in the background was acknowledged
        or left to the relay (never raises; a cancelled caller leaves the publish running)."""
        task = self._publishing.get(run_id)
        if task is not None:
            await asyncio.shield(task)

    def _plan(self, record: StepRecord, result: StepResult) -> SavePlan:
        """The orchestrator's own rule (:func:`~threadline.orchestration.runs.plan_save`) on the run
        as this worker sees it; the statement checks the row against what the plan assumes."""
        if not self.continues or record.finish is not None:
            return SavePlan()
        run = record.run
        view = RunRow.stored_by_worker(run_id=run.run_id, resource_id=run.resource_id, thread_id=run.thread_id,
                                       agent_id=run.agent_id, epoch=run.epoch, step=run.step, attempt=record.attempt)
        plan = plan_save(view, result)
        if plan.announce is not None and should_fail("save_unannounced", run.thread_id):
            return replace(plan, announce=None)  # fault injection: as if the row refused the announcement
        return plan

    async def save(self, record: StepRecord) -> None:
        """See :meth:`threadline.runtime.step.ports.StepStore.save`: one statement, one round trip
        (:func:`threadline.store.steps.save_step`, with the run's finish and sub-agent calls in
        its transaction when there are any), then the step result (or the lifecycle records that
        announced the step) is published from memory and marked published later
        (:meth:`Outbox.publish_stored`)."""
        run = record.run
        result = step_result(record)
        plan = self._plan(record, result)
        own = self._own.pop(run.run_id, [])
        announce = (announcement(run, plan.announce, self._topics.lifecycle, own)
                    if plan.announce is not None else None)
        state_json = orjson.dumps(record.state)  # encoded once: stored, and kept for the next step
        atomic = record.finish is not None or bool(record.children)
        async with self._conn() as conn, (conn.transaction() if atomic else nullcontext()):
            finish = await self._queue_finish(conn, record)
            sent = time.perf_counter()
            saved = await save_step(
                conn, topics=self._topics, run=_fence(run), entries=record.entries, consumed=record.consumed,
                state=orjson.Fragment(state_json), next_seq=record.next_seq, result=result,
                final_fields=final_fields(record), lease_ttl_s=self._ttl,
                claim_for=self._owner if plan.claim is not None else None, announce=announce)
            returned = time.perf_counter()
        if self._on_saved is not None:
            self._on_saved(run.run_id)
        if saved.claimed:
            self._next[run.run_id] = _claimed_next(record, saved, state_json)
        saved_at = time.perf_counter()
        await pause_point("after_step_result_stored", run.thread_id)
        out = self._outgoing(run, saved, announce, own)
        earlier = self._publishing.get(run.run_id)
        if saved.claimed:  # the next step runs meanwhile (decision 37)
            task = asyncio.create_task(self._publish(run, out, finish, earlier, True),
                                       name=f"step-result-{run.run_id}-{run.step}")
            self._publishing[run.run_id] = task
            task.add_done_callback(functools.partial(self._forget, run.run_id))
            self._times[run.run_id] = (saved_at, time.perf_counter(), sent, returned)
        else:
            await self._publish(run, out, finish, earlier, False)

    async def _queue_finish(self, conn: asyncpg.Connection, record: StepRecord) -> list[Queued]:
        """In the save's transaction: the sub-agent calls the step waits for (stored with it, or not
        at all) and the run's finish, published only once the step is durable (with its nested
        copy, decision 78). Returns the finish's outbox rows."""
        run = record.run
        if record.children:
            await record_child_requests(conn, run.run_id, run.step, record.children)
        if record.approvals:
            await record_approval_requests(conn, run.run_id, run.step, record.approvals)
        if record.finish is None:
            return []
        key = thread_key(run.resource_id, run.thread_id)
        finish = [await add_raw(conn, self._topics.chunks(run.resource_id, run.thread_id),
                                orjson.dumps(record.finish), key=key, headers=chunk_headers())]
        if (parent := nested_target(run.options)) is not None:
            finish.append(await add_raw(
                conn, self._topics.chunks(parent["resource_id"], parent["thread_id"]),
                orjson.dumps(nested_chunk(record.finish, parent)),
                key=thread_key(parent["resource_id"], parent["thread_id"]), headers=chunk_headers()))
        return finish

    def _outgoing(self, run: StepRun, saved: Saved, announce: Announcement | None, own: list[int]) -> list[Queued]:
        """The outbox rows the save queued for Kafka: the step result for the orchestrator, or the
        lifecycle records that announced the step (decision 103), which this worker then counts
        as its own while its chain goes on."""
        key = thread_key(run.resource_id, run.thread_id)
        if saved.box is not None:
            out = [queued(saved.box, self._topics.step_results, key, saved.headers, saved.value)]
        else:
            assert announce is not None
            kept = announce.records[len(announce.records) - len(saved.announced):]  # the start's only when queued
            out = [queued(i, announce.topic, key, h, v) for i, (v, h) in zip(saved.announced, kept, strict=True)]
            own = own + saved.announced
        if saved.claimed:
            self._own[run.run_id] = own[-_OWN_KEPT:]
            if len(self._own) > _OWN_RUNS:  # chains abandoned without a last save: only costs announcements
                self._own.clear()
        return out

    def _forget(self, run_id: str, task: asyncio.Task[None]) -> None:
        if self._publishing.get(run_id) is task:
            del self._publishing[run_id]

    async def _publish(self, run: StepRun, out: list[Queued], finish: list[Queued],
                       earlier: asyncio.Task[None] | None, continued: bool) -> None:
        """Publish a stored step result, or the lifecycle rows that announced the step (decision
        103), ``out`` (and the run's held ``finish`` before it, at once), after
        the run's earlier result published in the background (``earlier``): a run's results reach
        the orchestrator in step order. A result Kafka does not take stays in the outbox, where
        the relay publishes it; the run's later results then follow it through the relay.

        Raises (only when awaited inline, not ``continued`` in the background): what publishing
        raised that is not transient. In the background nothing is raised: the row is left to
        the relay and logged.
        """
        unflushed: Exception | None = None
        if finish:  # before the result (the thread's next run streams after it), not
            try:  # after the earlier result: the stream ends as soon as the step is durable (decision 65)
                await self._outbox.flush(list(finish))
            except Exception as exc:  # noqa: BLE001 - raised below, after the earlier result settled
                unflushed = exc
        if earlier is not None:
            await asyncio.shield(earlier)  # never raises; its failure puts the run in _relayed
        try:
            if unflushed is not None:  # the result follows its finish through the relay
                raise unflushed
            if run.run_id in self._relayed:  # an earlier result of the run waits for the relay: after it
                raise OutboxNotAcknowledgedError({out[0]: RuntimeError("an earlier step result waits for the relay")})
            await self._outbox.flush(list(out))
        except Exception as exc:
            if not is_transient(exc) and not continued:
                raise
            # stored and committed: the step is done; the relay publishes its result once Kafka
            # (or Postgres, for the mark) is back. Raising would only retry a step task that
            # finds its step stored. A continued run's later results follow it through the relay,
            # so the orchestrator gets them in order.
            if continued:
                self._relayed.add(run.run_id)
            log.warning("step result stored; publishing it is left to the outbox relay", run_id=run.run_id,
                        step=run.step, error=repr(exc), background=continued)
        finally:
            if not continued:
                self._relayed.discard(run.run_id)

    async def record_model_output(self, run: StepRun, attempt: int, output: dict[str, Any],
                                  call_ids: Sequence[str] = ()) -> dict[str, tuple[Any, str | None]]:
        """See :meth:`threadline.runtime.step.ports.StepStore.record_model_output` (one statement)."""
        async with self._conn() as conn:
            return await record_model_output(conn, _fence(run), attempt, self._owner, output, call_ids, self._ttl)

    async def restart_attempt(self, run: StepRun, attempt: int, retry_count: int) -> None:
        """See :meth:`threadline.runtime.step.ports.StepStore.restart_attempt`."""
        async with self._conn() as conn, conn.transaction():
            await restart_attempt(conn, run.run_id, run.thread_id, run.epoch, run.step, attempt=attempt,
                                  retry_count=retry_count)

    async def tool_results(self, run: StepRun, call_ids: list[str]) -> dict[str, tuple[Any, str | None]]:
        """See :meth:`threadline.runtime.step.ports.StepStore.tool_results`."""
        async with self._conn() as conn:
            return await tool_results(conn, run.run_id, call_ids)

    async def hold_call(self, run: StepRun, call: ToolCallPayload) -> None:
        """See :meth:`threadline.runtime.step.ports.StepStore.hold_call`."""
        async with self._conn() as conn:
            await record_approval_requests(conn, run.run_id, run.step, [call])

    async def approvals(self, run: StepRun, call_ids: list[str]) -> dict[str, tuple[str, str | None]]:
        """See :meth:`threadline.runtime.step.ports.StepStore.approvals`."""
        async with self._conn() as conn:
            return await answers(conn, run.run_id, call_ids)

    async def save_tool_result(self, run: StepRun, call_id: str, tool_name: str, result: object,
                               error: str | None) -> None:
        """See :meth:`threadline.runtime.step.ports.StepStore.save_tool_result`. The tool's side effect
        has happened: a transient fault (PostgreSQL restarting) is retried for up to
        :data:`TOOL_RESULT_RETRY_S` with the waits of :data:`~threadline.transient.STORE_BACKOFF`
        rather than handing the step back, whose re-execution would run the tool again (the insert
        keeps the first record, so a retry after a lost answer changes nothing). Raises what the last
        attempt raised once that time is spent."""
        async for attempt in retrying(STORE_BACKOFF, for_s=TOOL_RESULT_RETRY_S):
            with attempt:
                if attempt.retry_state.attempt_number > 1:
                    log.warning("retrying a tool result's store", run_id=run.run_id, tool_call_id=call_id,
                                attempt=attempt.retry_state.attempt_number)
                async with self._conn() as conn:
                    await save_tool_result(conn, run.run_id, call_id, tool_name, result, error)

    async def still_owner(self, run: StepRun, attempt: int) -> bool:
        """See :meth:`threadline.runtime.step.ports.StepStore.still_owner`."""
        async with self._conn() as conn:
            return await heartbeat(conn, run.run_id, self._owner, attempt)

    def workflow_journal(self, run: StepRun, attempt: int, tool_call_id: str) -> PgJournal:
        """Where a workflow tool call of ``run``'s step records its steps under ``attempt``
        (:mod:`threadline.worker.journal`, decision 81)."""
        return PgJournal(self._conn, run_id=run.run_id, epoch=run.epoch, tool_call_id=tool_call_id,
                         owner=self._owner, attempt=attempt)

    async def more_pending(self, run: StepRun, exclude: list[str]) -> bool:
        """See :meth:`threadline.runtime.step.ports.StepStore.more_pending`."""
        async with self._conn() as conn:
            return await has_pending(conn, run.run_id, exclude)


