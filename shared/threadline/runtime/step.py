"""Executing one step of a run on a processor-worker (seed 000, "execution order in the agentic
loop"). Any worker can take any step: everything a step needs is read from Postgres and
everything the next step needs is written back, fenced by the thread lease.

One step:
 1. step 0: load the thread history, add the instructions, emit ``start``;
 2. drain signals addressed to the run into the list (echo chunks; a new response message id
    after step 0);
 3. step 0: ``process_input``; every step: system messages reset, ``process_input_step``;
 4. ``process_llm_request``; the model call (or a cached response) streamed chunk by chunk
    through ``process_output_stream`` onto the thread's chunk topic;
 5. ``process_llm_response``; the response message built from the *processed* chunks;
 6. ``process_output_step`` (before any tool runs), then each tool with its hooks and
    ``process_tool_result``; the ``tool-result`` chunk through ``process_output_stream``;
 7. ``step-finish``; on the last step ``process_output_result`` and ``finish``;
 8. chunks acknowledged, then the effects and the step result written in one transaction.
"""

from __future__ import annotations

import asyncio
import copy
import os
import time
from typing import Any

import asyncpg
import orjson
import structlog

from threadline._internal.attrdict import AttrDict, wrap
from threadline._internal.faults import armed, deaf, pause_point, should_fail
from threadline.config import Settings
from threadline.errors import ModelCallError, StaleWriterError
from threadline.events import StepResult, StepTask
from threadline.ids import new_id
from threadline.kafka.admin import TopicAdmin
from threadline.transient import is_transient
from threadline.kafka.producer import Producer
from threadline.logging import get_logger
from threadline.runtime.agent import Agent
from threadline.runtime.chunk_writer import ChunkWriter
from threadline.runtime.keepalive import KeepAlive
from threadline.runtime.llm import ModelOutcome, stream_model
from threadline.runtime.messages import MessageList
from threadline.runtime.processor import PrepareStep, ProcessorRunner, TripWire, resolve_list
from threadline.events import chunks
from threadline.events.signals import retry_feedback, signal_to_message
from threadline.runtime.step_state import (StepState, StepWriter, add_usage, error_view, final_text,
                                          hand_back_step, replay)
from threadline.runtime.tool_runner import read_result, run_tool_call, set_invocation
from threadline.runtime.registry import Catalogue
from threadline.runtime.tools import ToolContext, ToolHooks
from threadline.store import leases
from threadline.store.db import Database
from threadline.store.orchestration import claim_terminal
from threadline.store.outbox import Outbox
from threadline.store.steps import (StepBusy, begin_attempt, forget_model_output, has_pending, heartbeat,
                                   load_history, mark_drained, pending_signals, persist_step, record_model_output,
                                   recorded_model_output)
from threadline.topics import Topics, thread_key

log = get_logger(__name__)
DEFAULT_MAX_STEPS = 5


class StepExecutor:
    """Runs step tasks for the agents of this process."""

    def __init__(self, *, db: Database, producer: Producer, admin: TopicAdmin, outbox: Outbox,
                 topics: Topics, settings: Settings, agents: dict[str, Agent],
                 catalogue: Catalogue | None = None) -> None:
        self._db = db
        self._producer = producer
        self._admin = admin
        self._outbox = outbox
        self._topics = topics
        self._settings = settings
        self._agents = agents
        self._catalogue = catalogue or Catalogue()
        self._owner = f"{settings.instance_id}:{os.getpid()}:{new_id('x')}"  # this process's step-owner token
        self._running: dict[str, asyncio.Task[str]] = {}
        self._aborted: set[str] = set()
        self._keepalive = KeepAlive(db, self._owner, beat_s=settings.step_heartbeat_s,
                                    renew_every_s=settings.lease_ttl_s / 3, lease_ttl_s=settings.lease_ttl_s)

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
            task.cancel()

    async def catch_up_aborts(self) -> None:
        """After the LISTEN connection healed: stop steps of runs aborted meanwhile."""
        if not self._running:
            return
        rows = await self._db.fetch("SELECT run_id FROM runs WHERE run_id = ANY($1::text[]) AND status = 'aborted'",
                                    list(self._running))
        for r in rows:
            self.on_abort(r["run_id"])

    async def execute(self, task: StepTask) -> None:
        """Execute ``task`` unless it is stale or already done (redelivery is harmless).

        When another worker still executes the step (its heartbeat moves: a rebalance handed the
        task over while that worker lives), wait; take the step over only once the heartbeat has
        stood still for ``3 × step_heartbeat_s`` as seen from here, or was handed back.
        """
        watched, since = None, 0.0
        while True:
            run = await self._db.fetchrow("SELECT * FROM runs WHERE run_id = $1", task.run_id)
            if run is not None and run["status"] == "aborted" and not run["terminal_emitted"]:
                await self._end_aborted(run, None)  # aborted while its step task was in flight
                return
            if run is None or run["status"] != "running" or run["epoch"] != task.epoch \
                    or run["step"] != task.step or run["steps_done"] > task.step:
                log.info("stale or duplicate step task skipped", run_id=task.run_id, step=task.step)
                return
            agent = self._agents.get(run["agent_id"])
            topic = self._topics.chunks(run["resource_id"], run["thread_id"])
            await self._admin.ensure_chunk_topic(topic, retention_ms=self._settings.chunk_retention_ms)
            loop = asyncio.get_running_loop()
            still = watched is not None and loop.time() - since >= 3 * self._settings.step_heartbeat_s
            try:
                async with self._db.transaction() as conn:
                    if should_fail("step_first_write", run["thread_id"]):  # C21: the connection resets
                        await conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")
                    begun = await begin_attempt(conn, run, self._settings.lease_ttl_s, owner=self._owner,
                                                takeover_from=watched if still else None)
                break
            except StaleWriterError:
                begun = None
                break
            except StepBusy as busy:
                if busy.heartbeat != watched:
                    if watched is None:
                        log.info("step executed by a live worker; waiting", run_id=task.run_id, step=task.step)
                    watched, since = busy.heartbeat, loop.time()
                await asyncio.sleep(self._settings.step_heartbeat_s)
        if begun is None:
            log.info("step no longer ours; skipped", run_id=task.run_id, step=task.step)
            return
        writer = ChunkWriter(self._producer, topic, run_id=run["run_id"], step=task.step,
                             attempt=begun["attempt"], seq=begun["seq_base"],
                             key=thread_key(run["resource_id"], run["thread_id"]))
        if begun["restarted"]:  # an earlier attempt died mid-step: subscribers drop its chunks
            await writer.emit(chunks.attempt_discarded_chunk(task.step, begun["attempt"] - 1, "re-executed"))
        self._keepalive.add(run, writer)
        try:
            with structlog.contextvars.bound_contextvars(run_id=run["run_id"], thread_id=run["thread_id"],
                                                         step=task.step, attempt=task.attempt):
                log.info("step started")
                child = asyncio.create_task(self._execute(run, agent, writer, bool(begun["restarted"])))
                self._running[run["run_id"]] = child
                try:
                    outcome = await child
                except asyncio.CancelledError:
                    current = asyncio.current_task()
                    if run["run_id"] not in self._aborted or (current is not None and current.cancelling()):
                        self._keepalive.discard(run["run_id"])  # no beat after the hand-back
                        await hand_back_step(self._db, run, self._owner)
                        raise  # shutdown, not an abort
                    outcome = "aborted"
                    await self._end_aborted(run, writer)
                except StaleWriterError:
                    now = await self._db.fetchrow("SELECT status FROM runs WHERE run_id = $1", run["run_id"])
                    if now is not None and now["status"] == "aborted":
                        await self._end_aborted(run, writer)
                    raise
                except Exception as exc:  # noqa: BLE001 - never leave a run orphaned
                    if is_transient(exc):  # Kafka or Postgres went away: hand the step back
                        log.warning("infrastructure fault mid-step; the step task is retried and the "
                                    "step re-executed under a new attempt", error=repr(exc))
                        raise
                    log.exception("step could not run; failing the run")
                    outcome = "failed"
                    await self._fail_run(run, writer, {"kind": "internal", "message": f"{type(exc).__name__}: {exc}"})
                log.info("step done", outcome=outcome, chunks=writer.seq - run["next_seq"])
        except StaleWriterError as exc:
            log.warning("stale writer: step result discarded", run_id=exc.run_id, epoch=exc.epoch)
        finally:
            self._running.pop(run["run_id"], None)
            self._aborted.discard(run["run_id"])
            self._keepalive.discard(run["run_id"])

    async def _execute(self, run: asyncpg.Record, agent: Agent | None, writer: ChunkWriter,
                       restarted: bool = False) -> str:
        step_no, run_id = run["step"], run["run_id"]
        state: dict[str, Any] = copy.deepcopy(run["state"]) or {}
        options = {**(agent.default_options if agent else {}), **(run["options"] or {})}
        request_context = {**(options.get("request_context") or {}), "thread_id": run["thread_id"],
                           "resource_id": run["resource_id"]}
        if agent is None:
            await self._fail_run(run, writer, {"kind": "configuration",
                                               "message": f"no agent {run['agent_id']!r} in this worker"}, state)
            return "failed"
        cat = self._catalogue.processors
        inputs = resolve_list(options.get("input_processors", agent.input_processors), "input",
                              request_context, agent.id, cat)
        if callable(options.get("prepare_step")):  # seed: runs after the input processors
            inputs.append(PrepareStep(options["prepare_step"]))
        runner = ProcessorRunner(
            input_processors=inputs,
            output_processors=resolve_list(options.get("output_processors", agent.output_processors),
                                           "output", request_context, agent.id, cat),
            error_processors=resolve_list(options.get("error_processors", agent.error_processors), "error",
                                          request_context, agent.id, cat),
            states=state.setdefault("processor_state", {}), request_context=request_context,
            retry_count=state.get("retry_count", 0) + (1 if restarted and state.get("retry_count", 0) else 0))
        # a crashed retry attempt spent its share of the budget: requests stay capped (C05 d)
        async with self._db.connection() as conn:
            history = await load_history(conn, run["thread_id"], run_id) if step_no == 0 else []
            signals = await pending_signals(conn, run_id)
            if step_no == 0:  # the first request answers what woke the run; deliveries join at the next boundary
                signals = [sig for sig in signals if sig["mode"] != "deliver"]
            await mark_drained(conn, [sig["id"] for sig in signals], step_no)
            recorded = await recorded_model_output(conn, run_id, step_no) if restarted else None
        if step_no == 0:
            ml = MessageList(thread_id=run["thread_id"], resource_id=run["resource_id"])
            ml.add(history, "memory")
            for sm in agent.system_messages(request_context):
                ml.add_system(sm)
            response_id = new_id("msg")
        else:
            ml = MessageList.from_state(state["message_list"], thread_id=run["thread_id"],
                                        resource_id=run["resource_id"])
            response_id = state["response_message_id"]
            if signals:  # a drained signal starts a new assistant message after it
                response_id = new_id("msg")
        step = StepState(run=run, agent=agent, writer=writer, ml=ml, runner=runner, response_id=response_id,
                     steps=state.setdefault("steps", []), state=state,
                     usage_total=state.setdefault("usage", {}), recorded=recorded)
        runner.writer = StepWriter(step, through_processors=False)
        if step_no == 0:
            await writer.emit(chunks.start_chunk(agent.id, response_id))
        consumed = []
        for sig in signals:
            ml.add(signal_to_message(sig["payload"], thread_id=run["thread_id"],
                                     resource_id=run["resource_id"]), "input")
            consumed.append(sig["id"])
        step.echoes = [chunks.echo_chunk(sig["payload"]) for sig in signals]
        outcome, final, finish_reason, error, tripwire = "continue", False, None, None, None
        try:
            finish_reason, final = await self._step(step, options, consumed)
            outcome = "finished" if final else "continue"
        except TripWire as tw:
            ml = step.ml
            final, outcome, finish_reason, tripwire = True, "tripwire", "other", tw.payload()
            log.info("tripwire", run_id=run_id, processor_id=tw.processor_id, reason=tw.reason)
            for msg in ml.get.response.db():  # the reply of a blocked run is not stored
                ml.remove_by_ids([msg["id"]])
            await writer.emit(chunks.tripwire_chunk(tripwire))
            await self._finish_chunk(step, "tripwire", finish_reason="other", tripwire=tripwire)
        except ModelCallError as exc:
            log.warning("model call failed; the run fails", kind=exc.kind, error=str(exc)[:300])
            final, outcome, finish_reason = True, "failed", "error"
            error = {"kind": exc.kind, "message": str(exc), "statusCode": exc.status_code}
            await self._fail(step, error)
        except Exception as exc:  # noqa: BLE001 - a failing step fails its run, never the worker
            if is_transient(exc):  # not the run's fault: re-executed, not failed (see execute)
                raise
            log.exception("step failed", run_id=run_id, step=step_no)
            final, outcome, finish_reason = True, "failed", "error"
            error = {"kind": "internal", "message": f"{type(exc).__name__}: {exc}"}
            await self._fail(step, error)
        await writer.flush()
        ml = step.ml
        state["message_list"] = ml.to_state()
        state["retry_count"] = runner.retry_count
        state["response_message_id"] = step.response_id
        text = final_text(step) if final else None
        result = StepResult(run_id=run_id, resource_id=run["resource_id"], thread_id=run["thread_id"],
                            step=step_no, attempt=writer.attempt, epoch=run["epoch"], outcome=outcome,
                            finish_reason=finish_reason, text=text, usage=step.usage_total, error=error,
                            tripwire=tripwire)
        final_fields = None
        if final:
            final_fields = {"status": {"finished": "finished", "failed": "failed",
                                       "tripwire": "tripwire"}[outcome],
                            "finish_reason": finish_reason, "text": text, "usage": step.usage_total,
                            "error": error, "tripwire": tripwire}
        await pause_point("before_step_result_write")
        async with self._db.transaction() as conn:
            box_id = await persist_step(conn, topics=self._topics, run=run, entries=ml._entries,
                                        consumed=consumed, state=state, next_seq=writer.seq, result=result,
                                        final_fields=final_fields, lease_ttl_s=self._settings.lease_ttl_s)
        await self._outbox.flush([box_id])
        return outcome

    async def _step(self, step: StepState, options: dict[str, Any], consumed: list[str]) -> tuple[str, bool]:
        """Steps 3–7 of the module docstring, with processor retries; returns
        ``(finish_reason, is_final)``.

        A retry (``abort(..., retry=True)`` or ``process_api_error`` → ``{retry: True}``) happens
        only while ``retry_count < cap`` (DECISIONS 1): the attempt is declared dead on the
        stream (``attempt-discarded``), its output is rolled back, a tripwire's reason is added
        as feedback (DECISIONS 3), and the step runs again under the next attempt number.
        """
        run, agent, ml, runner = step.run, step.agent, step.ml, step.runner
        if run["step"] == 0:
            await runner.process_input(ml)
            step.state["system_snapshot"] = [dict(m) for m in ml.get_system_messages()]
        for echo in step.echoes:  # drained signals are echoed once input checks have passed
            await step.writer.emit(echo)
        cap = self._retry_cap(options, agent, runner)
        while True:
            saved = orjson.loads(orjson.dumps(ml.to_state()))
            try:
                finish_reason, continued = await self._attempt(step, options, consumed)
                break
            except TripWire as tw:
                if not tw.retry or cap is None or runner.retry_count >= cap:
                    raise
                feedback: TripWire | None = tw
            except ModelCallError as exc:
                if cap is None or runner.retry_count >= cap or not await runner.process_api_error(
                        ml, error=error_view(exc), step_number=run["step"], steps=step.steps):
                    raise
                feedback = None
            step.ml = ml = MessageList.from_state(saved, thread_id=run["thread_id"], resource_id=run["resource_id"])
            runner.retry_count += 1
            dead = step.writer.attempt
            step.writer.attempt += 1
            await self._save_attempt(run, step.writer.attempt, runner.retry_count)
            await step.writer.emit(chunks.attempt_discarded_chunk(
                run["step"], dead, feedback.reason if feedback else "api-error"))
            if feedback is not None:
                ml.add(retry_feedback(feedback), "context")
            log.info("step retried", retry_count=runner.retry_count, cap=cap, attempt=step.writer.attempt)
        runner.retry_count = 0  # consecutive retries only (P24)
        if not continued:
            await self._output_result(step, finish_reason)
            await self._finish_chunk(step, finish_reason, finish_reason=finish_reason)
        return finish_reason, not continued

    def _retry_cap(self, options: dict[str, Any], agent: Agent, runner: ProcessorRunner) -> int | None:
        cap = options.get("max_processor_retries", agent.max_processor_retries)
        if cap is None and runner.error:
            cap = 10
            log.warning("implicit retry cap applied: error processors and no max_processor_retries",
                        cap=cap)
        return cap

    async def _record_output(self, step: StepState, raw_chunks: list[dict[str, Any]], outcome: ModelOutcome) -> None:
        output = {"chunks": [{"type": c["type"], "payload": c.get("payload")} for c in raw_chunks],
                  "usage": outcome.usage, "finish_reason": outcome.finish_reason}
        async with self._db.transaction() as conn:
            await record_model_output(conn, step.run, step.writer.attempt, output, self._settings.lease_ttl_s)
        await pause_point("after_model_output_recorded")

    async def _save_attempt(self, run: asyncpg.Record, attempt: int, retry_count: int) -> None:
        async with self._db.transaction() as conn:
            await leases.check(conn, run["thread_id"], run["run_id"], run["epoch"])
            await forget_model_output(conn, run["run_id"], run["step"])
            status = await conn.execute(
                "UPDATE runs SET attempt = $2, state = jsonb_set(state, '{retry_count}', to_jsonb($3::int)), "
                "updated_at = now() WHERE run_id = $1 AND attempt = $2 - 1", run["run_id"], attempt, retry_count)
            if not status.endswith(" 1"):
                raise StaleWriterError(run["run_id"], run["epoch"])

    async def _attempt(self, step: StepState, options: dict[str, Any], consumed: list[str]) -> tuple[str, bool]:
        """One attempt of the step: input step processors, the model, output step, tools, step-finish."""
        run, agent, ml, runner = step.run, step.agent, step.ml, step.runner
        step_no = run["step"]
        ml.replace_all_system_messages(step.state.get("system_snapshot", []))
        step_input: dict[str, Any] = {
            "model": agent.resolve_model(self._settings.model, runner.request_context),
            "tools": dict(agent.tools), "tool_choice": options.get("tool_choice"),
            "active_tools": options.get("active_tools"), "provider_options": options.get("provider_options"),
            "model_settings": options.get("model_settings"), "structured_output": options.get("structured_output"),
        }
        step_input = await runner.process_input_step(ml, step_input, step_number=step_no, steps=step.steps)
        model = step_input.get("model") or self._settings.model
        tools = dict(step_input.get("tools") or {})
        if step_input.get("active_tools") is not None:
            tools = {k: v for k, v in tools.items() if k in step_input["active_tools"]}
        prompt = [{"role": "system", "content": m["content"]} for m in ml.all_system_messages()] + ml.get.all.core()
        prompt, cached = await runner.process_llm_request(prompt, model=model, step_number=step_no,
                                                          steps=step.steps)
        await step.writer.emit(chunks.step_start_chunk(  # no startedAt on a cached replay
            step.response_id, started_at_ms=None if cached else int(time.time() * 1000)))
        step.response_message()
        outcome = ModelOutcome()
        processed: list[AttrDict] = []
        recorded, step.recorded = step.recorded, None
        if cached:
            source: Any = replay(cached, outcome)
        elif recorded is not None:  # a crashed attempt got this far: same output, same tool call ids
            log.info("model output replayed from the crashed attempt", chunks=len(recorded.get("chunks") or []))
            source = replay(recorded, outcome)
        else:
            source = stream_model(model=model, messages=prompt, tools=[t.spec() for t in tools.values()] or None,
                                  tool_choice=step_input.get("tool_choice"),
                                  model_settings=step_input.get("model_settings"),
                                  provider_options=step_input.get("provider_options"),
                                  api_base=self._settings.model_api_base,
                                  timeout_s=self._settings.model_timeout_s, outcome=outcome)
        raw_chunks: list[dict[str, Any]] = []
        try:
            async for chunk in source:
                raw_chunks.append(chunk)
                chunk["from"] = chunks.FROM_AGENT
                part = await step.emit(chunk)
                if part is not None:
                    processed.append(part)
        finally:
            await source.aclose()  # a tripwire mid-stream closes the model's HTTP stream now
        if recorded is not None:
            outcome.usage, outcome.finish_reason = recorded.get("usage"), recorded.get("finish_reason", outcome.finish_reason)
        if not cached and outcome.finish_reason == "other" and not outcome.text and not outcome.tool_calls:
            raise ModelCallError('the model finished with reason "other" without producing any output (P42)',
                                 kind="server_error", retryable=True)
        await runner.process_llm_response(raw_chunks, model=model, step_number=step_no, steps=step.steps,
                                          from_cache=bool(cached))
        text = "".join(p["payload"].get("text", "") for p in processed if p["type"] == "text-delta")
        calls = [dict(p["payload"]) for p in processed if p["type"] == "tool-call"]
        parts = step.response_message()["content"]["parts"]
        parts.append(wrap({"type": "step-start"}))
        if text:
            parts.append(wrap({"type": "text", "text": text}))
        for call in calls:
            parts.append(wrap({"type": "tool-invocation", "toolInvocation": {
                "state": "call", "toolCallId": call["toolCallId"], "toolName": call["toolName"],
                "args": call.get("args") or {}}}))
        usage = outcome.usage
        if armed("after_tool_call_chunk_published"):
            await step.writer.flush()
            await pause_point("after_tool_call_chunk_published")
        await runner.process_output_step(ml, step_number=step_no, steps=step.steps,
                                         finish_reason=outcome.finish_reason,
                                         tool_calls=[wrap(c) for c in calls] or None, text=text, usage=usage)
        results = []
        if outcome.finish_reason == "tool-calls":
            if recorded is None and not cached:  # before any tool runs: a re-execution replays this
                await self._record_output(step, raw_chunks, outcome)
            results = await self._run_tools(step, calls, tools, options)
        add_usage(step.usage_total, usage)
        step.steps.append({"stepNumber": step_no, "text": text, "toolCalls": calls, "toolResults": results,
                           "finishReason": outcome.finish_reason, "usage": usage})
        async with self._db.connection() as conn:
            more = await has_pending(conn, run["run_id"], consumed)
        max_steps = int(options.get("max_steps") or DEFAULT_MAX_STEPS)
        continued = (bool(results) or more) and step_no + 1 < max_steps
        await step.emit(chunks.step_finish_chunk(step.response_id, reason=outcome.finish_reason,
                                                 is_continued=continued, text=text, usage=usage))
        return outcome.finish_reason, continued

    async def _run_tools(self, step: StepState, calls: list[dict[str, Any]], tools: dict[str, Any],
                         options: dict[str, Any]) -> list[dict[str, Any]]:
        run, ml = step.run, step.ml
        call_hooks = options.get("hooks")
        if isinstance(call_hooks, str):  # named in a JSON request: looked up in the catalogue
            call_hooks = self._catalogue.hooks.get(call_hooks)
        hooks = step.agent.hooks.merged(ToolHooks.of(call_hooks))
        results = []
        async with self._db.connection() as conn:
            done = {r["tool_call_id"]: r for r in await conn.fetch(
                "SELECT tool_call_id, result, error FROM tool_calls WHERE run_id = $1 AND tool_call_id = ANY($2::text[])",
                run["run_id"], [c["toolCallId"] for c in calls])}
        for call in calls:
            if call["toolCallId"] not in done:  # still this step's owner? (else another worker runs it)
                async with self._db.connection() as conn:
                    if not await heartbeat(conn, run["run_id"], self._owner, step.writer.attempt):
                        raise StaleWriterError(run["run_id"], run["epoch"])
            if call["toolCallId"] in done:  # ran before a crash: never run a side effect twice
                prior = done[call["toolCallId"]]
                log.info("tool result reused", tool=call["toolName"], tool_call_id=call["toolCallId"])
                results.append(await self._tool_outcome(step, call, prior["result"], prior["error"]))
                continue
            ctx = ToolContext(tool_call_id=call["toolCallId"], run_id=run["run_id"], thread_id=run["thread_id"],
                              resource_id=run["resource_id"], agent_id=step.agent.id, step=run["step"],
                              idempotency_key=f"{run['run_id']}:{call['toolCallId']}",
                              writer=StepWriter(step, through_processors=True),
                              request_context=step.runner.request_context)
            output, error = await run_tool_call(call=call, tools=tools, hooks=hooks, context=ctx,
                                                agent_meta={"agent_id": step.agent.id, "agentId": step.agent.id,
                                                            "agent_name": step.agent.name})
            final = output
            if error is None:
                await step.runner.process_tool_result(ml, step_number=run["step"], steps=step.steps,
                                                      tool_name=call["toolName"], tool_call_id=call["toolCallId"],
                                                      args=call.get("args"), result=output)
                found, replaced = read_result(ml, call["toolCallId"])
                final = replaced if found else output
            async with self._db.connection() as conn:  # what ran is recorded (processed view only, K3)
                await conn.execute("INSERT INTO tool_calls (run_id, tool_call_id, tool_name, result, error) "
                                   "VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING", run["run_id"],
                                   call["toolCallId"], call["toolName"], final, error)
            await pause_point("after_tool_result_stored")
            results.append(await self._tool_outcome(step, call, final, error))
        return results

    async def _tool_outcome(self, step: StepState, call: dict[str, Any], result: Any, error: str | None) -> dict[str, Any]:
        """Put a tool's (final) result or error into the list and onto the stream."""
        base = {"toolCallId": call["toolCallId"], "toolName": call["toolName"]}
        if error is not None:
            set_invocation(step.ml, step.response_id, call["toolCallId"], state="output-error", errorText=error)
            await step.emit(chunks.tool_error_chunk(call["toolCallId"], call["toolName"], call.get("args"), error))
            return {**base, "error": error}
        set_invocation(step.ml, step.response_id, call["toolCallId"], state="result", result=result)
        await step.emit(chunks.tool_result_chunk(call["toolCallId"], call["toolName"], call.get("args"), result))
        return {**base, "result": result}

    async def _output_result(self, step: StepState, finish_reason: str) -> None:
        await step.runner.process_output_result(step.ml, result={
            "text": final_text(step), "usage": step.usage_total, "finishReason": finish_reason,
            "steps": step.steps})

    async def _finish_chunk(self, step: StepState, reason: str, *, finish_reason: str,
                            tripwire: dict[str, Any] | None = None, error: Any = None) -> None:
        chunk = wrap(chunks.finish_chunk(reason, finish_reason=finish_reason, usage=step.usage_total,
                                         tripwire=tripwire))
        try:  # processors see the terminal chunk but cannot drop or block it
            await step.runner.process_output_stream(chunk, step.ml)
        except TripWire as tw:
            log.warning("abort on the finish chunk ignored", processor_id=tw.processor_id)
        await step.writer.emit(chunk)

    async def _fail(self, step: StepState, error: dict[str, Any]) -> None:
        await step.writer.emit(chunks.error_chunk(error))
        await step.writer.emit(chunks.step_finish_chunk(step.response_id, reason="error", is_continued=False,
                                                        text=None, usage=None, has_text=False))
        try:
            await self._output_result(step, "error")
        except Exception:  # noqa: BLE001 - the run is failing already
            log.warning("process_output_result raised on a failed run", exc_info=True)
        await self._finish_chunk(step, "error", finish_reason="error")

    async def _end_aborted(self, run: asyncpg.Record, writer: ChunkWriter | None) -> None:
        """Emit the aborted run's ``abort`` + ``finish`` (if no one else has): after the chunks
        this worker already published when it was mid-step, else from the stored sequence.

        When the interrupted attempt already streamed its own ``finish`` (the abort came between
        that chunk and the step result), or another worker's attempt is left unfinished, that
        attempt is declared dead first (``attempt-discarded``), so the run shows one ``finish``.
        """
        async with self._db.transaction() as conn:
            claimed = await claim_terminal(conn, run["run_id"])
        if claimed is None:
            return
        dead = None
        if writer is None:
            topic = self._topics.chunks(run["resource_id"], run["thread_id"])
            writer = ChunkWriter(self._producer, topic, run_id=run["run_id"], step=claimed["step"],
                                 attempt=claimed["attempt"], seq=claimed["next_seq"],
                                 key=thread_key(run["resource_id"], run["thread_id"]))
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
        log.info("run aborted; terminal chunks emitted", run_id=run["run_id"], discarded_attempt=dead)

    async def _fail_run(self, run: asyncpg.Record, writer: ChunkWriter, error: dict[str, Any],
                        state: dict[str, Any] | None = None) -> None:
        """End the run as failed when its step could not even run: ``error`` then ``finish``."""
        await writer.emit(chunks.error_chunk(error))
        await writer.emit(chunks.finish_chunk("error", finish_reason="error", with_output=False))
        await writer.flush()
        result = StepResult(run_id=run["run_id"], resource_id=run["resource_id"], thread_id=run["thread_id"],
                            step=run["step"], attempt=writer.attempt, epoch=run["epoch"], outcome="failed",
                            finish_reason="error", error=error)
        async with self._db.transaction() as conn:
            # what was addressed to the run ends with it; left pending it would wake the next run
            consumed = [r["id"] for r in await pending_signals(conn, run["run_id"])]
            box_id = await persist_step(conn, topics=self._topics, run=run, entries=[], consumed=consumed,
                                        state=state if state is not None else (run["state"] or {}),
                                        next_seq=writer.seq, result=result,
                                        final_fields={"status": "failed", "finish_reason": "error", "error": error},
                                        lease_ttl_s=self._settings.lease_ttl_s)
        await self._outbox.flush([box_id])
