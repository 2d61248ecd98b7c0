"""Executing step tasks on a processor-worker. Any worker can take any step: everything a step
needs is read from PostgreSQL and everything the next step needs is written back, fenced by the
thread lease. The step itself runs in :class:`threadline.runtime.step.loop.StepLoop`; this module
claims it (waiting while another live worker has it), keeps it alive, stops it when its run is
aborted, hands it back on shutdown, and ends the run when the step cannot run at all."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping
from typing import Any

import structlog

from threadline._internal import step_clock
from threadline._internal.faults import deaf, pause_point
from threadline._internal.recent import RecentIds
from threadline.config import Settings
from threadline.errors import StaleWriterError
from threadline.events import StepTask, chunks
from threadline.flows.publish import Outbox
from threadline.ids import new_id
from threadline.kafka.admin import TopicAdmin
from threadline.kafka.chunk_writer import ChunkWriter
from threadline.kafka.layout import chunk_place
from threadline.kafka.producer import Producer
from threadline.logging import get_logger
from threadline.ops import tracing
from threadline.ops.metrics import CHUNKS, FIRST_CHUNK_SECONDS, STEP_SECONDS, STEPS_IN_FLIGHT
from threadline.orchestration.children import nested_target
from threadline.runtime.agent import Agent
from threadline.runtime.memory import DEFAULT_LAST_MESSAGES
from threadline.runtime.model.llm import stream_model
from threadline.runtime.model.model_calls import RetryPolicy
from threadline.runtime.registry import Catalogue
from threadline.runtime.step.loop import StepLoop
from threadline.runtime.step.ports import (
    AbortedRun,
    Begun,
    Busy,
    Claimed,
    Fail,
    ModelFn,
    Skipped,
    StepInputs,
    StepRecord,
    StepRun,
)
from threadline.store.db import Database
from threadline.store.model_limits import PgModelLimiter, parse_limits
from threadline.store.runs import claim_terminal, run_status
from threadline.store.steps import aborted_among, hand_back
from threadline.topics import Topics
from threadline.transient import is_transient
from threadline.worker import step_gap
from threadline.worker.keepalive import KeepAlive
from threadline.worker.step_store import PgStepStore

log = get_logger(__name__)

ABORT_MEMORY_S = 300.0
"""How long the worker remembers an abort it heard (s). It matters only between a step's claim and
its start here (milliseconds); a step begun later reads the abort from the run row instead."""



def _log_timing(writer: ChunkWriter, gap: dict[str, float | None] | None, start: dict[str, float] | None) -> None:
    """Log where the overhead before this step's first chunk went (``step gap``, the previous
    step's points in ``gap``) and where a step begun from its task spent its start (``step start``)."""
    if gap is not None:
        gap["first_sent"] = writer.first_sent
        log.info("step gap", **(step_gap.segments(gap) or {"incomplete": True}), **step_gap.save_split(gap))
    if start is not None and (begun_in := step_gap.start_segments(start)) is not None:
        log.info("step start", **begun_in)

def _observe_step(started: float, outcome: str, writer: ChunkWriter, first_seq: int) -> None:
    """The step's metrics: its duration by outcome, its time to first chunk, its chunks."""
    STEPS_IN_FLIGHT.dec()
    STEP_SECONDS.labels(outcome).observe(time.perf_counter() - started)
    if writer.first_sent is not None:
        FIRST_CHUNK_SECONDS.observe(writer.first_sent - started)
    CHUNKS.inc(max(0, writer.seq - first_seq))


class StepExecutor:
    """Runs step tasks for the agents of this process.

    Args:
        db, producer, admin, outbox, topics, settings: the service's connections and settings.
        agents: the agents this worker runs, by id.
        catalogue: processors and hooks requests may name.
        model: the model function (default :func:`~threadline.runtime.model.llm.stream_model`).
    """

    def __init__(self, *, db: Database, producer: Producer, admin: TopicAdmin, outbox: Outbox,
                 topics: Topics, settings: Settings, agents: dict[str, Agent],
                 catalogue: Catalogue | None = None, model: ModelFn = stream_model) -> None:
        self._db = db
        self._producer = producer
        self._admin = admin
        self._topics = topics
        self._settings = settings
        self._agents = agents
        self._owner = f"{settings.instance_id}:{os.getpid()}:{new_id('x')}"  # this process's step-owner token
        self._loop = StepLoop(default_model=settings.model, model_api_base=settings.model_api_base,
                              model_timeout_s=settings.model_timeout_s, catalogue=catalogue, model=model,
                              max_retries=settings.model_max_retries, tool_timeout_s=settings.tool_timeout_s,
                              sub_agent_max_depth=settings.sub_agent_max_depth,
                              retry_policy=RetryPolicy(initial_s=settings.model_retry_initial_s,
                                                       max_wait_s=settings.model_retry_max_wait_s),
                              limiter=PgModelLimiter(db, parse_limits(settings.model_limits),
                                                     burst_s=settings.model_limit_burst_s)
                              if settings.model_limits else None)
        self._running: dict[str, asyncio.Task[str]] = {}
        # aborts heard of (every run's, by NOTIFY); one matters for moments after it arrives
        self._aborted = RecentIds(keep_s=ABORT_MEMORY_S)
        self._keepalive = KeepAlive(db, self._owner, beat_s=settings.step_heartbeat_s,
                                    renew_every_s=settings.lease_ttl_s / 3, lease_ttl_s=settings.lease_ttl_s)
        self._store = PgStepStore(db=db, outbox=outbox, topics=topics, owner=self._owner,
                                  lease_ttl_s=settings.lease_ttl_s, on_saved=self._keepalive.discard,
                                  continues=settings.worker_continues,
                                  history_limit=max([DEFAULT_LAST_MESSAGES] + [a.memory.reads for a in agents.values()]))

    def stop_continuing(self) -> None:
        """Shutdown: steps that end from now on hand their run's next step to the orchestrator
        (a step continued here during the drain would only be handed back)."""
        self._store.continues = False

    async def close(self) -> None:
        """Stop the keep-alive loop (service shutdown, after the steps were drained or handed back)."""
        await self._keepalive.close()

    def on_abort(self, run_id: str) -> None:
        """The run was aborted (NOTIFY): stop its step now; the model call is closed."""
        if deaf():  # fault injection: the notification is lost
            return
        self._aborted.add(run_id)
        task = self._running.get(run_id)
        if task is not None:
            self._loop.abort(run_id)  # the processors' abort_signal, before the cancellation reaches them
            task.cancel()

    async def catch_up_aborts(self) -> None:
        """After the LISTEN connection healed: stop steps of runs aborted meanwhile."""
        if not self._running:
            return
        async with self._db.connection() as conn:
            aborted = await aborted_among(conn, list(self._running))
        for run_id in aborted:
            self.on_abort(run_id)

    async def execute(self, task: StepTask) -> None:
        """Execute ``task`` unless it is stale or already done (redelivery is harmless).

        When another worker still executes the step (its heartbeat moves: a rebalance handed the
        task over while that worker lives), wait; take the step over only once the heartbeat has
        stood still for ``3 × step_heartbeat_s`` as seen from here, or was handed back.
        """
        received = time.perf_counter()
        await pause_point("before_step_claim")  # fault injection: the task received, the step not claimed
        watched, since = None, 0.0
        loop = asyncio.get_running_loop()
        topic = self._topics.chunks(task.resource_id, task.thread_id)
        while True:
            still = watched is not None and loop.time() - since >= 3 * self._settings.step_heartbeat_s
            begun = await self._claim(task, topic, takeover_from=watched if still else None)
            if not isinstance(begun, Busy):
                break
            if begun.heartbeat != watched:
                if watched is None:
                    log.info("step executed by a live worker; waiting", run_id=task.run_id, step=task.step)
                watched, since = begun.heartbeat, loop.time()
            await asyncio.sleep(self._settings.step_heartbeat_s)
        if isinstance(begun, AbortedRun):
            await self._end_aborted(begun.run, None)
            return
        if isinstance(begun, Skipped):
            log.info(begun.reason, run_id=task.run_id, step=task.step)
            return
        claimed: Claimed | None = begun
        gap: dict[str, float | None] | None = None
        start: dict[str, float] | None = {"received": received, "claimed": time.perf_counter()}
        try:  # the steps this worker continues itself run within the task (decision 31)
            while claimed is not None:
                claimed, gap = await self._run_claimed(claimed, task, gap, start)
                start = None
        finally:
            self._aborted.discard(task.run_id)
            # the task is done once its results were acknowledged or left to the relay (decision 37)
            await self._store.settle(task.run_id)

    async def _claim(self, task: StepTask, topic: str, *, takeover_from: object) -> Begun:
        """Take the thread's chunk topic (its registry row, then the broker: a brand-new thread's
        topic costs a statement and two Kafka requests) and claim the step, side by side
        (decision 101); the step's first chunk waits for both.

        Raises:
            What either raised, the topic's first. A step claimed while the topic could not be
            taken is left to the task's retry, as a step whose infrastructure failed mid-step
            (re-executed under a new attempt).
        """
        took, begun = await asyncio.gather(
            self._take_topic(task, topic),
            self._store.begin(task.run_id, step=task.step, epoch=task.epoch, thread_id=task.thread_id,
                              takeover_from=takeover_from),
            return_exceptions=True)
        if isinstance(took, BaseException):
            if isinstance(begun, Claimed):
                log.warning("chunk topic not taken after the step was claimed; the step task is retried and the "
                            "step re-executed under a new attempt", run_id=task.run_id, step=task.step,
                            error=repr(took))
            raise took
        if isinstance(begun, BaseException):
            raise begun
        return begun

    async def _run_claimed(self, claimed: Claimed, task: StepTask, gap: dict[str, float | None] | None,
                           start: dict[str, float] | None = None
                           ) -> tuple[Claimed | None, dict[str, float | None] | None]:
        """Run the claimed step; returns the run's next step when this worker claimed it with the
        step's store (the worker continues the run), else ``None``, and the points of the step
        gap passed so far (``gap``: the previous step's, :mod:`threadline.worker.step_gap`).
        ``start``: the step start's points so far, for a step begun from its task (``step start``
        line, decision 84)."""
        run, inputs = claimed.run, claimed.inputs
        if gap is not None:
            gap["next_begun"] = time.perf_counter()
        writer = self._writer(run, inputs)
        if run.run_id in self._aborted:  # aborted at the boundary, before this (continued) step began
            await self._end_aborted(run, writer)
            return None, None
        if inputs.restarted:  # an earlier attempt died mid-step: subscribers drop its chunks
            await writer.emit(chunks.attempt_discarded_chunk(run.step, inputs.attempt - 1, "re-executed"))
        self._keepalive.add(run, writer)
        nxt: Claimed | None = None
        started, ended = time.perf_counter(), "interrupted"
        STEPS_IN_FLIGHT.inc()
        try:
            with structlog.contextvars.bound_contextvars(run_id=run.run_id, thread_id=run.thread_id,
                                                         step=run.step, attempt=inputs.attempt), \
                    tracing.span(f"step {run.step}", **{"threadline.run_id": run.run_id,
                                                        "threadline.thread_id": run.thread_id,
                                                        "threadline.resource_id": run.resource_id,
                                                        "threadline.agent_id": run.agent_id,
                                                        "threadline.step": run.step,
                                                        "threadline.attempt": inputs.attempt}):
                log.info("step started", continued=run.step != task.step)
                timed = step_clock.POINTS.set(start)  # the step's task copies it (decision 84)
                child = asyncio.create_task(self._step(run, inputs, writer))
                step_clock.POINTS.reset(timed)
                self._running[run.run_id] = child
                outcome = ended = await self._outcome(run, writer, child)
                nxt = self._store.take_next(run.run_id) if outcome == "continue" else None
                _log_timing(writer, gap, start)
                log.info("step done", outcome=outcome, chunks=writer.seq - run.next_seq, continues=nxt is not None)
        except StaleWriterError as exc:
            log.warning("stale writer: step result discarded", run_id=exc.run_id, epoch=exc.epoch)
        finally:
            _observe_step(started, ended, writer, run.next_seq)
            self._running.pop(run.run_id, None)
            self._keepalive.discard(run.run_id)
            self._store.take_next(run.run_id)  # a next step claimed but not run here: the task's redelivery takes it
            times = self._store.take_times(run.run_id)
        if nxt is None or times is None:
            return nxt, None
        return nxt, {"flush_start": writer.flush_started, "flushed": writer.flushed_at, "saved": times[0],
                     "published": times[1], "save_sent": times[2], "save_returned": times[3]}

    async def _take_topic(self, task: StepTask, topic: str) -> bool:
        """Take the thread's own chunk topic (per-thread layout); the shared one was made at start."""
        if self._topics.shared_layout:
            return False
        return await self._admin.ensure_chunk_topic(topic, retention_ms=self._settings.chunk_retention_ms,
                                                    thread=(task.resource_id, task.thread_id))

    def _writer(self, run: StepRun, inputs: StepInputs) -> ChunkWriter:
        """The step's chunk writer on the thread's topic; a child run's also mirrors its chunks,
        nested, to its parent's thread (decision 78)."""
        own = chunk_place(self._topics, self._settings.chunk_partitions, run.resource_id, run.thread_id)
        writer = ChunkWriter(self._producer, own.topic, run_id=run.run_id, step=run.step, attempt=inputs.attempt,
                             seq=inputs.seq_base, key=own.key.decode(), partition=own.partition,
                             ack_timeout_s=self._settings.kafka_ack_timeout_s, hold_finish=True)
        writer.mirror = self._mirror(run)
        return writer

    def _mirror(self, run: StepRun) -> tuple[str, int, bytes, Mapping[str, Any]] | None:
        """A child run's parent ``(topic, partition, key, target)`` its chunks are mirrored to,
        nested (decision 78); ``None`` for a run no sub-agent call started."""
        if (parent := nested_target(run.options)) is None:
            return None
        up = chunk_place(self._topics, self._settings.chunk_partitions, parent["resource_id"], parent["thread_id"])
        return (up.topic, up.partition, up.key, parent)

    async def _outcome(self, run: StepRun, writer: ChunkWriter, child: asyncio.Task[str]) -> str:
        """The step task's outcome: its own, ``aborted`` (an abort cancelled it) or ``failed`` (it
        raised; the run is failed). Re-raises a shutdown's cancellation (the step handed back), a
        stale writer (the run ended if it was aborted) and a transient fault (the task retried)."""
        try:
            return await child
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if run.run_id not in self._aborted or (current is not None and current.cancelling()):
                self._keepalive.discard(run.run_id)  # no beat after the hand-back
                await self._hand_back(run)
                raise  # shutdown, not an abort
            await self._end_aborted(run, writer)
            return "aborted"
        except StaleWriterError:
            if await run_status(self._db, run.run_id) == "aborted":
                await self._end_aborted(run, writer)
            raise
        except Exception as exc:
            if is_transient(exc):  # Kafka or Postgres went away: hand the step back
                log.warning("infrastructure fault mid-step; the step task is retried and the "
                            "step re-executed under a new attempt", error=repr(exc))
                raise
            log.exception("step could not run; failing the run")
            await self._fail_run(run, writer, {"kind": "internal", "message": f"{type(exc).__name__}: {exc}"})
            return "failed"

    async def _step(self, run: StepRun, inputs: StepInputs, writer: ChunkWriter) -> str:
        """Run the step in the loop; returns the outcome for the log."""
        agent = self._agents.get(run.agent_id)
        if agent is None:
            await self._fail_run(run, writer, {"kind": "configuration",
                                               "message": f"no agent {run.agent_id!r} in this worker"})
            return "failed"
        outcome = await self._loop.run(run, agent, inputs, writer, self._store)
        return outcome.wire

    async def _hand_back(self, run: StepRun) -> None:
        """Shutdown mid-step: clear the heartbeat so the next owner re-executes at once."""
        try:
            async with asyncio.timeout(2):
                async with self._db.connection() as conn:
                    await hand_back(conn, run.run_id, self._owner)
            log.info("step handed back", run_id=run.run_id)
        except Exception:  # noqa: BLE001 - the heartbeat then goes stale instead
            log.warning("could not hand the step back", run_id=run.run_id)

    async def _end_aborted(self, run: StepRun, writer: ChunkWriter | None) -> None:
        """Emit the aborted run's ``abort`` + ``finish`` (if no one else has): after the chunks
        this worker already published when it was mid-step, else from the stored sequence.

        When the interrupted attempt already streamed its own ``finish`` (the abort came between
        that chunk and the step result), or another worker's attempt is left unfinished, that
        attempt is declared dead first (``attempt-discarded``), so the run shows one ``finish``.
        """
        async with self._db.transaction() as conn:
            claimed = await claim_terminal(conn, run.run_id)
        if claimed is None:
            return
        dead = None
        if writer is not None:
            writer.drop_held()  # a finish held for a step that was never stored: not published
        if writer is None:
            own = chunk_place(self._topics, self._settings.chunk_partitions, run.resource_id, run.thread_id)
            writer = ChunkWriter(self._producer, own.topic, run_id=run.run_id, step=claimed["step"],
                                 attempt=claimed["attempt"], seq=claimed["next_seq"], key=own.key.decode(),
                                 partition=own.partition, ack_timeout_s=self._settings.kafka_ack_timeout_s)
            writer.mirror = self._mirror(run)  # a child's end is nested on its parent's topic too (decision 219)
            if claimed["outstanding"]:
                dead = claimed["attempt"]
        elif writer.finished:
            dead = writer.attempt
        if dead is not None:
            writer.attempt = dead + 1
            await writer.emit(chunks.attempt_discarded_chunk(writer.step, dead, "aborted"))
        for chunk in chunks.abort_chunks():
            await writer.emit(chunk)
        await writer.flush()
        log.info("run aborted; terminal chunks emitted", run_id=run.run_id, discarded_attempt=dead)

    async def _fail_run(self, run: StepRun, writer: ChunkWriter, error: dict[str, Any]) -> None:
        """End the run as failed when its step could not even run, or could not store its result:
        ``error`` then ``finish``; what was addressed to the run ends with it. When the attempt
        already streamed its own ``finish``, it is declared dead first (``attempt-discarded``,
        the run's attempt + 1), so the run shows one ``finish``. A ``finish`` held back for the
        step's result (decision 19) was never published: it is dropped, its ``seq`` reused."""
        writer.drop_held()
        if writer.finished:
            dead, writer.attempt = writer.attempt, writer.attempt + 1
            await self._store.restart_attempt(run, writer.attempt, run.stored().get("retry_count", 0))
            await writer.emit(chunks.attempt_discarded_chunk(run.step, dead, "failed"))
        await writer.emit(chunks.error_chunk(error))
        await writer.emit(chunks.finish_chunk("error", finish_reason="error", with_output=False))
        await writer.flush()
        await self._store.save(StepRecord(run=run, attempt=writer.attempt, outcome=Fail(error), entries=[],
                                          consumed=None, state=run.stored(), next_seq=writer.seq))
