"""The processor-worker's :class:`~threadline.runtime.ports.StepStore` on PostgreSQL (the SQL is
in :mod:`threadline.store.steps`): claiming a step and loading what it reads, saving what it
produced with its result in the outbox, and the crash-safety writes in between — every write
fenced by the thread lease."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager, nullcontext
from dataclasses import dataclass, replace
from typing import Any

import asyncpg
import orjson
from tenacity import AsyncRetrying, retry_if_exception, stop_after_delay, wait_exponential

from threadline._internal.faults import pause_point, should_fail
from threadline.events import StepResult
from threadline.events.chunks import chunk_headers
from threadline.events.codec import encode
from threadline.logging import get_logger
from threadline.orchestration.runs import RunRow, unannounced_start, worker_continues
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
from threadline.runtime.sub_agents import nested_chunk, nested_target
from threadline.store.db import Database
from threadline.store.orchestration import lifecycle_event
from threadline.store.outbox import Outbox, OutboxNotAcknowledgedError, Queued, add_raw, queued
from threadline.store.steps import (
    Announcement,
    begin_step,
    has_pending,
    heartbeat,
    history_of,
    record_model_output,
    restart_attempt,
    save_step,
    save_step_continue,
    save_tool_result,
    tool_results,
)
from threadline.store.sub_agents import record_child_requests
from threadline.store.workflows import PgJournal
from threadline.topics import Topics, thread_key
from threadline.transient import is_transient

log = get_logger(__name__)

RESERVED_CONNECTIONS = 3
"""Pool connections step operations leave to the rest of the worker (keep-alive, outbox marks and
relay, aborts)."""

_STATUS = {"finished": "finished", "failed": "failed", "tripwire": "tripwire"}


@dataclass(frozen=True, slots=True)
class Carried:
    """The state a step of this worker just stored, for the run's next step on this worker:
    ``state`` (the step's ``RunState.dump()``, its own objects) and ``json`` (as stored)."""

    state: dict[str, Any]
    json: bytes


def step_run(row: asyncpg.Record, run_id: str, carried: Carried | None = None) -> StepRun:
    """The :class:`StepRun` view of the run columns of a ``begin_step`` row; ``carried``: the
    run's state as this worker just stored it, for a row that does not carry it (the lean
    save-and-claim's): the next step goes on with its objects (decision 102)."""
    if "state" in row or carried is None:
        state, stored, stored_json = RunState.of(row["state"]), row["state"], None
    else:
        state, stored, stored_json = RunState.carried(carried.state), None, carried.json
    return StepRun(run_id=run_id, resource_id=row["resource_id"], thread_id=row["thread_id"],
                   agent_id=row["agent_id"], epoch=row["epoch"], step=row["step"], next_seq=row["next_seq"],
                   options=dict(row["options"] or {}), state=state, stored_state=stored, stored_json=stored_json)


def _begun(row: asyncpg.Record, run_id: str, carried: Carried | None = None) -> Begun:
    """What a ``threadline_begin_step`` row means for the worker (``carried``: see :func:`step_run`)."""
    outcome = row["outcome"]
    if outcome == "skipped":
        return Skipped("stale or duplicate step task skipped")
    if outcome == "stale":
        return Skipped("step no longer ours; skipped")
    if outcome == "busy":
        return Busy(row["heartbeat"])
    run = step_run(row, run_id, carried)
    if outcome == "aborted":
        return AbortedRun(run)  # aborted while its step task was in flight
    inputs = StepInputs(attempt=row["attempt"], seq_base=row["seq_base"], restarted=bool(row["restarted"]),
                        history=history_of(row) if row["step"] == 0 else [],
                        signals=[Signal(sig["id"], sig["payload"]) for sig in row["signals"] or []],
                        recorded=row["recorded"], overrides=row.get("overrides"))
    return Claimed(run, inputs)


def _fence(run: StepRun) -> dict[str, Any]:
    """The fields of the run the fenced writes of :mod:`threadline.store.steps` read."""
    return {"run_id": run.run_id, "thread_id": run.thread_id, "resource_id": run.resource_id,
            "epoch": run.epoch, "step": run.step}


def announcement(run: StepRun, topic: str, own: list[int]) -> Announcement:
    """The lifecycle the save-and-claim statement queues in place of ``run``'s step result when the
    orchestrator would only announce the step (decision 103), for ``topic`` (the lifecycle topic):
    the run's start as the orchestrator's :func:`~threadline.orchestration.runs.unannounced_start`
    says for a run whose start nobody announced yet (queued only then), then ``step_finished``.
    ``own``: see :class:`~threadline.store.steps.Announcement`."""
    view = RunRow.stored_by_worker(run_id=run.run_id, resource_id=run.resource_id, thread_id=run.thread_id,
                                   agent_id=run.agent_id, epoch=run.epoch, step=run.step, attempt=1)
    start = unannounced_start(replace(view, start_announced=False))
    ids = {"resource_id": run.resource_id, "thread_id": run.thread_id, "run_id": run.run_id, "agent_id": run.agent_id}
    events = [lifecycle_event(kind, ids) for kind in start]
    events.append(lifecycle_event("step_finished", ids, step=run.step))
    return Announcement(topic=topic, records=[encode(e) for e in events], start_rows=len(start), own=own)


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
        continues: a step whose outcome is ``continue`` is stored with the run's next step claimed
            for this worker, in one statement, when the orchestrator would schedule it anyway
            (``worker_continues``; :meth:`take_next` hands it out). Off: every next step goes
            through the orchestrator (``THREADLINE_WORKER_CONTINUES``).
        publish_async: the result of a step whose next step this worker claimed is published in
            the background while the next step runs (decision 37); off: :meth:`save` returns
            once Kafka acknowledged it (``THREADLINE_STEP_RESULT_ASYNC``). Either way a result
            Kafka did not take stays in the outbox for the relay, and a run's results are
            published in step order.
        history_limit: most stored messages step 0 reads (the largest ``last_messages`` of the
            agents; each run then keeps its agent's last ``last_messages``).
        lean: store-and-claim with the one-pass statement (decision 49,
            ``THREADLINE_SAVE_CLAIM_LEAN``); off: migration 0013's.
        announces: a step stored with the next one claimed (``lean``) is announced by the same
            statement when the orchestrator would only announce it (migration 0026, decision
            103): its lifecycle rows are published instead of its result
            (``THREADLINE_WORKER_ANNOUNCES``).
    """

    def __init__(self, *, db: Database, outbox: Outbox, topics: Topics, owner: str, lease_ttl_s: float,
                 connections: int | None = None, on_saved: Callable[[str], None] | None = None,
                 continues: bool = False, publish_async: bool = False, history_limit: int = 200,
                 lean: bool = True, announces: bool = True) -> None:
        self._db = db
        self.announces = announces
        self._own: dict[str, list[int]] = {}  # run -> its lifecycle rows this worker queued lately
        self._history_limit = history_limit
        self.lean = lean
        self.continues = continues
        self.publish_async = publish_async
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

    async def begin(self, run_id: str, *, step: int, epoch: int, takeover_from: Any = None,
                    thread_id: str = "") -> Begun:
        """See :meth:`threadline.runtime.ports.StepStore.begin`: one statement, one round trip
        (:func:`threadline.store.steps.begin_step`). ``thread_id`` (the step task's) only
        selects the fault-injection point ``step_first_write``. A task of a step that a worker
        continued claims the run's current step (the task stands for the chain, decision 32)."""
        async with self._conn() as conn:
            if should_fail("step_first_write", thread_id):  # the connection resets before the claim
                await conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")
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

    def _may_continue(self, record: StepRecord, result: StepResult) -> bool:
        """The orchestrator's own rule (:func:`threadline.orchestration.runs.worker_continues`),
        applied to the run as this worker sees it; the statement checks it again on the row."""
        if not self.continues or not isinstance(record.outcome, Continue) or record.finish is not None:
            return False
        run = record.run
        view = RunRow.stored_by_worker(run_id=run.run_id, resource_id=run.resource_id, thread_id=run.thread_id,
                                       agent_id=run.agent_id, epoch=run.epoch, step=run.step, attempt=record.attempt)
        return worker_continues(view, result)

    async def save(self, record: StepRecord) -> None:
        """See :meth:`threadline.runtime.ports.StepStore.save`: one statement, one round trip
        (:func:`threadline.store.steps.save_step`), then the step result is published from
        memory and marked published later (:meth:`Outbox.publish_stored`)."""
        run, outcome = record.run, record.outcome
        error = outcome.error if isinstance(outcome, Fail) else None
        tripwire = outcome.tripwire if isinstance(outcome, Trip) else None
        result = StepResult(run_id=run.run_id, resource_id=run.resource_id, thread_id=run.thread_id, step=run.step,
                            attempt=record.attempt, epoch=run.epoch, outcome=outcome.wire,
                            finish_reason=outcome.finish_reason, text=record.text,
                            usage=record.usage if record.usage is not None else {}, error=error, tripwire=tripwire)
        final_fields: dict[str, Any] | None = None
        if not isinstance(outcome, Continue | Suspend):
            final_fields = {"status": _STATUS[outcome.wire], "finish_reason": outcome.finish_reason,
                            "error": error}
            if record.usage is not None:  # a step that ran (not one failed before it could)
                final_fields.update(text=record.text, usage=record.usage, tripwire=tripwire)
        key = thread_key(run.resource_id, run.thread_id)
        finish: list[Queued] = []
        nxt: Begun | None = None
        continues = self._may_continue(record, result)
        own = self._own.pop(run.run_id, [])
        announce = announcement(run, self._topics.lifecycle, own) if continues and self.announces and self.lean else None
        sent = returned = 0.0
        announced: list[int] = []
        state_json = orjson.dumps(record.state)  # encoded once: stored, and kept for the next step
        atomic = record.finish is not None or bool(record.children)
        async with self._conn() as conn, (conn.transaction() if atomic else nullcontext()):
            if record.children:  # the sub-agent calls the step waits for: stored with it, or not at all
                await record_child_requests(conn, run.run_id, run.step, record.children)
            if record.finish is not None:  # the run's finish: published only once the step is durable
                finish.append(await add_raw(conn, self._topics.chunks(run.resource_id, run.thread_id),
                                            orjson.dumps(record.finish), key=key, headers=chunk_headers()))
                if (parent := nested_target(run.options)) is not None:  # and its nested copy (decision 78)
                    finish.append(await add_raw(
                        conn, self._topics.chunks(parent["resource_id"], parent["thread_id"]),
                        orjson.dumps(nested_chunk(record.finish, parent)),
                        key=thread_key(parent["resource_id"], parent["thread_id"]), headers=chunk_headers()))
            # consumed None: what was addressed to the run ends with it; left pending it would wake the next run
            if continues:  # the next step claimed for this worker in the same statement (decision 31)
                sent = time.perf_counter()
                box_id, value, headers, row = await save_step_continue(
                    conn, topics=self._topics, run=_fence(run), entries=record.entries, consumed=record.consumed,
                    state=orjson.Fragment(state_json), next_seq=record.next_seq, result=result,
                    lease_ttl_s=self._ttl, owner=self._owner, lean=self.lean, announce=announce)
                returned = time.perf_counter()
                announced = list(row.get("announced") or [])
                nxt = (_begun(row, run.run_id, Carried(record.state, state_json)) if row["outcome"] is not None
                       else None)
            else:
                box_id, value, headers = await save_step(
                    conn, topics=self._topics, run=_fence(run), entries=record.entries, consumed=record.consumed,
                    state=orjson.Fragment(state_json), next_seq=record.next_seq, result=result, final_fields=final_fields,
                    lease_ttl_s=self._ttl)
        if self._on_saved is not None:
            self._on_saved(run.run_id)
        if isinstance(nxt, Claimed):
            self._next[run.run_id] = nxt
        elif nxt is not None:
            log.warning("next step not claimed after the store", run_id=run.run_id, step=run.step + 1,
                        outcome=type(nxt).__name__)
        saved = time.perf_counter()
        await pause_point("after_step_result_stored", run.thread_id)
        continued = isinstance(nxt, Claimed)
        if box_id is not None:  # the step result, for the orchestrator
            out = [queued(box_id, self._topics.step_results, key, headers, value)]
        else:  # announced by the statement (decision 103): its lifecycle rows instead
            assert announce is not None and nxt is not None
            kept = announce.records[len(announce.records) - len(announced):]  # the start's only when queued
            out = [queued(i, announce.topic, key, h, v) for i, (v, h) in zip(announced, kept, strict=True)]
            own = own + announced
        if continued:
            self._own[run.run_id] = own[-_OWN_KEPT:]
            if len(self._own) > _OWN_RUNS:  # chains abandoned without a last save: only costs announcements
                self._own.clear()
        earlier = self._publishing.get(run.run_id)
        if continued and self.publish_async:  # the next step runs meanwhile (decision 37)
            task = asyncio.create_task(self._publish(run, out, finish, earlier, continued),
                                       name=f"step-result-{run.run_id}-{run.step}")
            self._publishing[run.run_id] = task
            task.add_done_callback(functools.partial(self._forget, run.run_id))
        else:
            await self._publish(run, out, finish, earlier, continued)
        if continued:
            self._times[run.run_id] = (saved, time.perf_counter(), sent, returned)

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
            background = continued and self.publish_async
            if not is_transient(exc) and not background:
                raise
            # stored and committed: the step is done; the relay publishes its result once Kafka
            # (or Postgres, for the mark) is back. Raising would only retry a step task that
            # finds its step stored. A continued run's later results follow it through the relay,
            # so the orchestrator gets them in order.
            if continued:
                self._relayed.add(run.run_id)
            log.warning("step result stored; publishing it is left to the outbox relay", run_id=run.run_id,
                        step=run.step, error=repr(exc), background=background)
        finally:
            if not continued:
                self._relayed.discard(run.run_id)

    async def record_model_output(self, run: StepRun, attempt: int, output: dict[str, Any],
                                  call_ids: Sequence[str] = ()) -> dict[str, tuple[Any, str | None]]:
        """See :meth:`threadline.runtime.ports.StepStore.record_model_output` (one statement)."""
        async with self._conn() as conn:
            return await record_model_output(conn, _fence(run), attempt, self._owner, output, call_ids, self._ttl)

    async def restart_attempt(self, run: StepRun, attempt: int, retry_count: int) -> None:
        """See :meth:`threadline.runtime.ports.StepStore.restart_attempt`."""
        async with self._conn() as conn, conn.transaction():
            await restart_attempt(conn, run.run_id, run.thread_id, run.epoch, run.step, attempt=attempt,
                                  retry_count=retry_count)

    async def tool_results(self, run: StepRun, call_ids: list[str]) -> dict[str, tuple[Any, str | None]]:
        """See :meth:`threadline.runtime.ports.StepStore.tool_results`."""
        async with self._conn() as conn:
            return await tool_results(conn, run.run_id, call_ids)

    async def save_tool_result(self, run: StepRun, call_id: str, tool_name: str, result: Any,
                               error: str | None) -> None:
        """See :meth:`threadline.runtime.ports.StepStore.save_tool_result`. The tool's side effect
        has happened: a transient fault (PostgreSQL restarting) is retried with backoff for up
        to :data:`TOOL_RESULT_RETRY_S` rather than handing the step back, whose re-execution would
        run the tool again (the insert keeps the first record, so a retry after a lost answer
        changes nothing). Raises what the last attempt raised once that time is spent."""
        async for attempt in AsyncRetrying(retry=retry_if_exception(is_transient), reraise=True,
                                           stop=stop_after_delay(TOOL_RESULT_RETRY_S),
                                           wait=wait_exponential(multiplier=0.1, max=2.0)):
            with attempt:
                if attempt.retry_state.attempt_number > 1:
                    log.warning("retrying a tool result's store", run_id=run.run_id, tool_call_id=call_id,
                                attempt=attempt.retry_state.attempt_number)
                async with self._conn() as conn:
                    await save_tool_result(conn, run.run_id, call_id, tool_name, result, error)

    async def still_owner(self, run: StepRun, attempt: int) -> bool:
        """See :meth:`threadline.runtime.ports.StepStore.still_owner`."""
        async with self._conn() as conn:
            return await heartbeat(conn, run.run_id, self._owner, attempt)

    def workflow_journal(self, run: StepRun, attempt: int, tool_call_id: str) -> PgJournal:
        """Where a workflow tool call of ``run``'s step records its steps under ``attempt``
        (:mod:`threadline.store.workflows`, decision 81)."""
        return PgJournal(self._conn, run_id=run.run_id, epoch=run.epoch, tool_call_id=tool_call_id,
                         owner=self._owner, attempt=attempt)

    async def more_pending(self, run: StepRun, exclude: list[str]) -> bool:
        """See :meth:`threadline.runtime.ports.StepStore.more_pending`."""
        async with self._conn() as conn:
            return await has_pending(conn, run.run_id, exclude)


