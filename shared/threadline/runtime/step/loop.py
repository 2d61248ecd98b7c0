"""One step of a run: the agentic loop (processors, the model call, tools), against the ports of
:mod:`threadline.runtime.step.ports` — where the step's state is loaded and saved, where its chunks
go, and the model function. No SQL, no Kafka here.

One step:
 1. step 0: the thread history, the instructions, ``start``;
 2. the signals the step drained join the list (echo chunks; a new response message id after
    step 0);
 3. step 0: ``process_input``; every step: system messages reset, ``process_input_step``;
 4. ``process_llm_request``; the model call (or a cached response) streamed chunk by chunk
    through ``process_output_stream``;
 5. ``process_llm_response``; the response message built from the *processed* chunks;
 6. ``process_output_step`` (before any tool runs), then each tool with its hooks and
    ``process_tool_result``; the ``tool-result`` chunk through ``process_output_stream``;
 7. ``step-finish``; on the last step ``process_output_result`` and ``finish``;
 8. chunks acknowledged, then the effects and the step result saved in one call.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from threadline._internal.attrdict import AttrDict, wrap
from threadline._internal.faults import armed, pause_point
from threadline._internal.usercode import call_user
from threadline.errors import ModelCallError, StaleWriterError
from threadline.events import chunks
from threadline.events.signals import retry_feedback, signal_to_message
from threadline.ids import new_id
from threadline.logging import get_logger
from threadline.ops import tracing
from threadline.runtime.agent import Agent
from threadline.runtime.dynamic import ConfigCache, editor_overrides, processor_runner, run_system_messages
from threadline.runtime.editor import tool_descriptions, with_descriptions
from threadline.runtime.memory import for_run, recent
from threadline.runtime.messages import MessageList
from threadline.runtime.model import structured
from threadline.runtime.model.llm import ModelOutcome, stream_model
from threadline.runtime.model.model_calls import DEFAULT_MAX_RETRIES, ModelCaller, ModelChoice, ModelLimiter, RetryPolicy
from threadline.runtime.processor import ProcessorRunner, TripWire
from threadline.runtime.refs import resolve_options
from threadline.runtime.registry import Catalogue
from threadline.runtime.step.children import resume_children
from threadline.runtime.step.ports import (
    ChunkSink,
    Continue,
    Fail,
    Finish,
    ModelFn,
    StepInputs,
    StepOutcome,
    StepRecord,
    StepRun,
    StepStore,
    Suspend,
    Trip,
)
from threadline.runtime.step.state import StepState, StepWriter, add_usage, error_view, final_text, replay
from threadline.runtime.step.tools import read_result, run_tool_call, set_invocation
from threadline.runtime.sub_agents import Pending, SubAgentTool, request_for
from threadline.runtime.tools import ToolContext, ToolHooks
from threadline.runtime.transform import transcript_entries
from threadline.runtime.workflows import journal_factory
from threadline.transient import is_transient

log = get_logger(__name__)
DEFAULT_MAX_STEPS = 5


@dataclass(frozen=True, slots=True)
class Attempted:
    """How one attempt of a step ended (no processor retry pending)."""

    finish_reason: str
    """The model's finish reason."""
    continued: bool
    """The run takes another step (tool results, or signals pending, within ``max_steps``)."""


class StepLoop:
    """Runs the current step of a claimed run.

    Args:
        default_model: the model when neither the agent nor a processor names one.
        model_api_base: the OpenAI-compatible base URL for local models (``None``: the provider's).
        model_timeout_s: seconds a model call may take.
        catalogue: processors and hooks requests may name.
        model: the model function (default :func:`~threadline.runtime.model.llm.stream_model`).
        retry_policy: waits between model-level retries (docs/models.md).
        max_retries: retries of a model when neither its fallback entry, the call nor the agent
            sets any.
        limiter: cluster-wide provider limits (``None``: none).
    """

    def __init__(self, *, default_model: str, model_api_base: str | None, model_timeout_s: float,
                 catalogue: Catalogue | None = None, model: ModelFn = stream_model,
                 retry_policy: RetryPolicy | None = None, max_retries: int = DEFAULT_MAX_RETRIES,
                 limiter: ModelLimiter | None = None) -> None:
        self._limiter = limiter
        self._retry_policy = retry_policy or RetryPolicy()
        self._max_retries = max_retries
        self._default_model = default_model
        self._api_base = model_api_base
        self._timeout_s = model_timeout_s
        self._catalogue = catalogue or Catalogue()
        self._model = model
        self._configs = ConfigCache()

    async def run(self, run: StepRun, agent: Agent, inputs: StepInputs, sink: ChunkSink,
                  store: StepStore) -> StepOutcome:
        """Execute the step, stream its chunks to ``sink`` and save it through ``store``.

        A failing step fails its run (the outcome says so); transient infrastructure faults and
        :class:`~threadline.errors.StaleWriterError` propagate (the step is re-executed or was
        taken over).
        """
        step_no, state = run.step, run.state
        request_context = {**(run.options.get("request_context") or agent.default_options.get("request_context") or {}),
                           "thread_id": run.thread_id, "resource_id": run.resource_id}
        # the options given as functions of the request context, resolved once per run on this worker
        cfg = await self._configs.get(run.run_id, agent, request_context, self._default_model)
        options = resolve_options({**cfg.default_options, **run.options}, self._catalogue.module)
        # a crashed retry attempt spent its share of the budget: requests stay capped
        runner = processor_runner(options, cfg, request_context, agent.id, self._catalogue.processors,
                                  states=state.processor_state,
                                  retry_count=state.retry_count + (1 if inputs.restarted and state.retry_count else 0))
        signals = inputs.signals
        memory = for_run(cfg.memory, options.get("memory_options"))
        if step_no == 0:
            ml = MessageList(thread_id=run.thread_id, resource_id=run.resource_id)
            ml.add(recent(inputs.history, memory), "memory")
            # the editor's overrides as stored now, locked fields stripped; kept with the run (decision 69)
            state.editor = editor_overrides(agent, cfg.tools, inputs.overrides)
            for sm in await run_system_messages(agent, request_context, state.editor):
                ml.add_system(sm)  # instructions given as a plain function ran off the event loop
            response_id = new_id("msg")
        else:
            ml = MessageList.from_state(state.message_list or {}, thread_id=run.thread_id,
                                        resource_id=run.resource_id, live=state.live)
            response_id = state.response_message_id or new_id("msg")
        step = StepState(run=run, agent=agent, writer=sink, ml=ml, runner=runner, response_id=response_id,
                         steps=state.steps, state=state, usage_total=state.usage, recorded=inputs.recorded,
                         models=list(cfg.models), tools=with_descriptions(cfg.tools, tool_descriptions(state.editor)),
                         agent_metadata=cfg.metadata)
        runner.writer = StepWriter(step, through_processors=False)
        if step_no == 0:
            await sink.emit(chunks.start_chunk(agent.id, response_id))
        elif state.sub_agent_calls:  # the children of the suspended step ended: their results first
            await resume_children(step, store, self._tool_outcome)
        if step_no > 0 and signals:  # a drained signal starts a new assistant message after it
            step.response_id = new_id("msg")
        consumed = []
        for sig in signals:
            ml.add(signal_to_message(sig.payload, thread_id=run.thread_id, resource_id=run.resource_id), "input")
            consumed.append(sig.id)
        step.echoes = [chunks.echo_chunk(sig.payload) for sig in signals]
        outcome: StepOutcome
        try:
            done = await self._step(step, options, consumed, store)
            outcome = (Suspend(done.finish_reason) if step.children.requests  # waits for child runs
                       else Continue(done.finish_reason) if done.continued else Finish(done.finish_reason))
        except TripWire as tw:
            outcome = Trip(tw.payload())
            log.info("tripwire", run_id=run.run_id, processor_id=tw.processor_id, reason=tw.reason)
            for msg in step.ml.get.response.db():  # the reply of a blocked run is not stored
                step.ml.remove_by_ids([msg["id"]])
            await sink.emit(chunks.tripwire_chunk(outcome.tripwire))
            await self._finish_chunk(step, "tripwire", finish_reason="other", tripwire=outcome.tripwire)
        except ModelCallError as exc:
            log.warning("model call failed; the run fails", kind=exc.kind, error=str(exc)[:300])
            error: dict[str, Any] = {"kind": exc.kind, "message": str(exc), "statusCode": exc.status_code,
                                     "retryable": exc.retryable}
            if exc.retry_after_s is not None:
                error["retry_after_s"] = exc.retry_after_s
            outcome = Fail(error)
            await self._fail(step, outcome.error)
        except Exception as exc:
            if is_transient(exc):  # not the run's fault: re-executed, not failed
                raise
            log.exception("step failed", run_id=run.run_id, step=step_no)
            outcome = Fail({"kind": "internal", "message": f"{type(exc).__name__}: {exc}"})
            await self._fail(step, outcome.error)
        await sink.flush()
        state.message_list = step.ml.to_state()
        state.retry_count = runner.retry_count
        state.response_message_id = step.response_id
        final = not isinstance(outcome, Continue | Suspend)
        state.sub_agent_calls = step.children.calls if isinstance(outcome, Suspend) else None
        await pause_point("before_step_result_write", run.thread_id)
        held = getattr(sink, "held", None)  # the finish, published once stored (decision 19)
        # read-only memory, or memory off: the run's messages are not written to the thread
        entries: Sequence[tuple[Mapping[str, Any], str]] = step.ml._entries if memory.stores else []
        if entries and step.transforms:  # the stored transcript as the transforms show it (decision 72)
            entries = await transcript_entries(entries, step.tools if step.tools is not None else agent.tools,
                                               agent.transform)
        await store.save(StepRecord(run=run, attempt=sink.attempt, outcome=outcome, entries=entries,
                                    consumed=consumed, state=state.dump(), next_seq=sink.seq,
                                    text=final_text(step) if final else None, usage=step.usage_total,
                                    finish=held, children=step.children.requests if isinstance(outcome, Suspend) else []))
        if final:
            self._configs.drop(run.run_id)
        if held is not None:
            sink.held, sink.finished = None, True  # type: ignore[attr-defined]  # a ChunkWriter's
        return outcome

    async def _step(self, step: StepState, options: dict[str, Any], consumed: list[str],
                    store: StepStore) -> Attempted:
        """Steps 3–7 of the module docstring, with processor retries.

        A retry (``abort(..., retry=True)`` or ``process_api_error`` → ``{retry: True}``) happens
        only while ``retry_count < cap``: the attempt is declared dead on the stream
        (``attempt-discarded``), its output is rolled back, a tripwire's reason is added as
        feedback, and the step runs again under the next attempt number.
        """
        run, agent, ml, runner = step.run, step.agent, step.ml, step.runner
        if run.step == 0:
            await runner.process_input(ml)
            step.state.system_snapshot = [dict(m) for m in ml.get_system_messages()]
        for echo in step.echoes:  # drained signals are echoed once input checks have passed
            await step.writer.emit(echo)
        cap = self._retry_cap(options, agent, runner)
        while True:
            saved = orjson.dumps(ml.to_state())  # decoded only when the attempt is retried
            retry: dict[str, Any] | None = None
            try:
                done = await self._attempt(step, options, consumed, store)
                break
            except TripWire as tw:
                if not tw.retry or cap is None or runner.retry_count >= cap:
                    raise
                feedback: TripWire | None = tw
                step.ml = ml = MessageList.from_state(orjson.loads(saved), thread_id=run.thread_id,
                                                      resource_id=run.resource_id)
                retry = {"retryProcessorId": tw.processor_id, "retryReason": tw.reason, "retryMetadata": tw.metadata}
            except ModelCallError as exc:
                # the attempt's own additions are dropped first: the error processors edit the
                # list the failed request was built from, and their edits reach the retried request
                step.ml = ml = MessageList.from_state(orjson.loads(saved), thread_id=run.thread_id,
                                                      resource_id=run.resource_id)
                feedback = None
                if exc.streamed and step.next_model():  # the model died mid-answer: the next one takes over
                    await self._discard(step, store, "fallback", None)
                    continue
                asked = None
                if cap is not None and runner.retry_count < cap:
                    asked = await runner.process_api_error(ml, error=error_view(exc), step_number=run.step,
                                                           steps=step.steps)
                if not asked:
                    raise
                retry = {"retryProcessorId": asked["processorId"], "retryReason": f"api-error: {exc.kind}",
                         "retryMetadata": asked["metadata"]}
            runner.retry_count += 1
            await self._discard(step, store, feedback.reason if feedback else "api-error", retry)
            if feedback is not None:
                ml.add(retry_feedback(feedback), "context")
            log.info("step retried", retry_count=runner.retry_count, cap=cap, attempt=step.writer.attempt,
                     processor_id=retry and retry["retryProcessorId"])
        runner.retry_count = 0  # consecutive retries only
        if not done.continued:
            await self._output_result(step, done.finish_reason)
            await self._finish_chunk(step, done.finish_reason, finish_reason=done.finish_reason)
        return done

    async def _discard(self, step: StepState, store: StepStore, reason: str, retry: dict[str, Any] | None) -> None:
        """Declare the current attempt dead on the stream and continue under the next one."""
        dead = step.writer.attempt
        step.writer.attempt += 1
        await store.restart_attempt(step.run, step.writer.attempt, step.runner.retry_count)
        await step.writer.emit(chunks.attempt_discarded_chunk(step.run.step, dead, reason, retry))

    def _caller(self, step: StepState, options: dict[str, Any], model: str, chosen: ModelChoice) -> ModelCaller:
        """The model call of an attempt: the fallback list from the model in use, or only the
        model a processor chose. Retries: the entry's, else the call's ``max_retries`` (or
        ``model_settings.maxRetries``), else the agent's, else the worker's default."""
        settings = options.get("model_settings") or {}
        default = options.get("max_retries", settings.get("maxRetries", settings.get("max_retries")))
        if default is None:
            default = step.agent.max_retries if step.agent.max_retries is not None else self._max_retries
        assert step.models is not None
        if model == chosen.model:
            return ModelCaller(self._model, step.models, default_retries=int(default), policy=self._retry_policy,
                               start=step.model_index, limiter=self._limiter)
        return ModelCaller(self._model, [ModelChoice(model, chosen.max_retries)], default_retries=int(default),
                           policy=self._retry_policy, limiter=self._limiter)

    def _retry_cap(self, options: dict[str, Any], agent: Agent, runner: ProcessorRunner) -> int | None:
        cap: int | None = options.get("max_processor_retries", agent.max_processor_retries)
        if cap is None and runner.error:
            cap = 10
            log.warning("implicit retry cap applied: error processors and no max_processor_retries",
                        cap=cap)
        return cap

    async def _attempt(self, step: StepState, options: dict[str, Any], consumed: list[str],
                       store: StepStore) -> Attempted:
        """One attempt of the step: input step processors, the model, output step, tools, step-finish."""
        run, agent, ml, runner = step.run, step.agent, step.ml, step.runner
        step_no = run.step
        step.children = Pending()
        ml.replace_all_system_messages(step.state.system_snapshot or [])
        if step.models is None:
            step.models = (agent.resolve_models(self._default_model, runner.request_context)
                           if isinstance(agent.model, str)  # else a function (user code) may be called
                           else await call_user(agent.resolve_models, self._default_model, runner.request_context))
        chosen = step.models[step.model_index]
        step_input: dict[str, Any] = {
            "model": chosen.model,
            "tools": dict(step.tools if step.tools is not None else agent.tools), "tool_choice": options.get("tool_choice"),
            "active_tools": options.get("active_tools"), "provider_options": options.get("provider_options"),
            "model_settings": options.get("model_settings"), "structured_output": options.get("structured_output"),
        }
        step_input = await runner.process_input_step(ml, step_input, step_number=step_no, steps=step.steps)
        model = step_input.get("model") or self._default_model
        caller = self._caller(step, options, model, chosen)
        spec = structured.resolve(step_input.get("structured_output"))  # a bad schema fails here, clearly
        extra = {"response_format": spec.response_format()} if spec is not None else {}
        tools = dict(step_input.get("tools") or {})
        if step_input.get("active_tools") is not None:
            tools = {k: v for k, v in tools.items() if k in step_input["active_tools"]}
        prompt = [{"role": "system", "content": m["content"],  # instructions keep their providerOptions
                   **({"providerOptions": m["providerOptions"]} if m.get("providerOptions") else {})}
                  for m in ml.all_system_messages()] + ml.get.all.core()
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
            source = caller.stream(outcome, messages=prompt, tools=[t.spec() for t in tools.values()] or None,
                                   tool_choice=step_input.get("tool_choice"),
                                   model_settings=step_input.get("model_settings"),
                                   provider_options=step_input.get("provider_options"),
                                   api_base=self._api_base, timeout_s=self._timeout_s, **extra)
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
            if caller.choices is step.models:  # a fallback model stays in use for the step's retries
                step.model_index = caller.index
        if recorded is not None:
            outcome.usage = recorded.get("usage")
            outcome.finish_reason = recorded.get("finish_reason", outcome.finish_reason)
        usage = outcome.usage
        add_usage(step.usage_total, usage)  # billed even if a processor retries the attempt below
        if not cached and outcome.finish_reason == "other" and not outcome.text and not outcome.tool_calls:
            raise ModelCallError('the model finished with reason "other" without producing any output (P42)',
                                 kind="server_error", retryable=True)
        await runner.process_llm_response(raw_chunks, model=model, step_number=step_no, steps=step.steps,
                                          from_cache=bool(cached))
        text = "".join(p["payload"].get("text", "") for p in processed if p["type"] == "text-delta")
        reasoning = "".join(p["payload"].get("text", "") for p in processed if p["type"] == "reasoning-delta")
        calls = [dict(p["payload"]) for p in processed if p["type"] == "tool-call"]
        parts = step.response_message()["content"]["parts"]
        parts.append(wrap({"type": "step-start"}))
        if reasoning:  # what the output processors let through (a ReasoningTransformer's edits)
            parts.append(wrap({"type": "reasoning", "reasoning": reasoning,
                               "details": [{"type": "text", "text": reasoning}]}))
        invocations = [wrap({"type": "tool-invocation", "toolInvocation": {
            "state": "call", "toolCallId": call["toolCallId"], "toolName": call["toolName"],
            "args": call.get("args") or {}}}) for call in calls]
        texts = [wrap({"type": "text", "text": text})] if text else []
        # stored in the order streamed: calls whose input began before the text come first (B08 e)
        parts.extend(invocations + texts if _calls_first(processed) else texts + invocations)
        obj: Any = None
        if spec is not None and outcome.finish_reason != "tool-calls":  # the final answer is the object
            obj = spec.parse(text)
            await step.writer.emit(chunks.object_chunk(obj))
            await step.writer.emit(chunks.object_chunk(obj, final=True))
        if armed("after_tool_call_chunk_published"):
            await step.writer.flush()
            await pause_point("after_tool_call_chunk_published")
        await runner.process_output_step(ml, step_number=step_no, steps=step.steps,
                                         finish_reason=outcome.finish_reason,
                                         tool_calls=[wrap(c) for c in calls] or None, text=text, usage=usage)
        results = []
        if outcome.finish_reason == "tool-calls":
            done, owned = None, False  # the calls that ran before a crash; the owner just confirmed
            if recorded is None and not cached:  # before any tool runs: a re-execution replays this
                output = {"chunks": [{"type": c["type"], "payload": c.get("payload")} for c in raw_chunks],
                          "usage": outcome.usage, "finish_reason": outcome.finish_reason}
                done = await store.record_model_output(run, step.writer.attempt, output,
                                                       [c["toolCallId"] for c in calls])
                owned = not armed("after_model_output_recorded")  # a held owner asks again
                await pause_point("after_model_output_recorded")
            results = await self._run_tools(step, calls, tools, options, store, done, owned)
        step.steps.append({"stepNumber": step_no, "text": text, "toolCalls": calls, "toolResults": results,
                           "finishReason": outcome.finish_reason, "usage": usage,
                           **({"object": obj} if spec is not None and obj is not None else {})})
        max_steps = int(options.get("max_steps") or DEFAULT_MAX_STEPS)
        # pending signals matter only when nothing else continues the run (decision 88)
        more = bool(results) or bool(step.children.requests) or await store.more_pending(run, consumed)
        continued = bool(step.children.requests) or (more and step_no + 1 < max_steps)
        await step.emit(chunks.step_finish_chunk(step.response_id, reason=outcome.finish_reason,
                                                 is_continued=continued, text=text, usage=usage,
                                                 model=caller.choices[caller.index].model))
        return Attempted(outcome.finish_reason, continued)

    async def _run_tools(self, step: StepState, calls: list[dict[str, Any]], tools: dict[str, Any],
                         options: dict[str, Any], store: StepStore,
                         done: dict[str, tuple[Any, str | None]] | None, owned: bool) -> list[dict[str, Any]]:
        """Run the step's tool calls in order, each at most once per run. ``done``: what
        :meth:`StepStore.record_model_output` returned (the calls that already ran), or None to
        read it here; ``owned``: that call confirmed this attempt's ownership just now, so the
        first tool needs no second check (decision 88)."""
        run, ml = step.run, step.ml
        call_hooks = options.get("hooks")
        if isinstance(call_hooks, str):  # named in a JSON request: looked up in the catalogue
            call_hooks = self._catalogue.hooks.get(call_hooks)
        hooks = step.agent.hooks.merged(ToolHooks.of(call_hooks))
        results = []
        if done is None:
            done = await store.tool_results(run, [c["toolCallId"] for c in calls])
        for call in calls:
            sub = tools.get(call["toolName"])
            if isinstance(sub, SubAgentTool) and call["toolCallId"] not in done:  # a child run (decision 77)
                step.children.requests.append(request_for(run.run_id, run.thread_id, sub, call))
                step.children.calls.append({k: call.get(k) for k in ("toolCallId", "toolName", "args")})
                continue
            # still this step's owner? (else another worker runs it)
            if call["toolCallId"] not in done and not owned and not await store.still_owner(run, step.writer.attempt):
                raise StaleWriterError(run.run_id, run.epoch)
            owned = False  # a tool ran (or was reused) since: the next one asks again
            if call["toolCallId"] in done:  # ran before a crash: never run a side effect twice
                prior_result, prior_error = done[call["toolCallId"]]
                log.info("tool result reused", tool=call["toolName"], tool_call_id=call["toolCallId"])
                results.append(await self._tool_outcome(step, call, prior_result, prior_error))
                continue
            ctx = ToolContext(tool_call_id=call["toolCallId"], run_id=run.run_id, thread_id=run.thread_id,
                              resource_id=run.resource_id, agent_id=step.agent.id, step=run.step,
                              idempotency_key=f"{run.run_id}:{call['toolCallId']}",
                              writer=StepWriter(step, through_processors=True),
                              request_context=step.runner.request_context,
                              journal=journal_factory(store, run, step.writer.attempt))
            try:
                with tracing.span(f"execute_tool {call['toolName']}", **{
                        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": call["toolName"],
                        "gen_ai.tool.call.id": call["toolCallId"]}):
                    output, error = await run_tool_call(call=call, tools=tools, hooks=hooks, context=ctx,
                                                        agent_meta={"agent_id": step.agent.id, "agentId": step.agent.id,
                                                                    "agent_name": step.agent.name,
                                                                    "agent_metadata": step.agent_metadata})
            except asyncio.CancelledError:  # an abort (or a shutdown) stops the step: tell the tool
                ctx.abort_signal.set()
                raise
            final = output
            if error is None:
                await step.runner.process_tool_result(ml, step_number=run.step, steps=step.steps,
                                                      tool_name=call["toolName"], tool_call_id=call["toolCallId"],
                                                      args=call.get("args"), result=output)
                found, replaced = read_result(ml, call["toolCallId"])
                final = replaced if found else output
            # what ran is recorded (the processed view only)
            await store.save_tool_result(run, call["toolCallId"], call["toolName"], final, error)
            await pause_point("after_tool_result_stored", run.thread_id)
            results.append(await self._tool_outcome(step, call, final, error))
        return results

    async def _tool_outcome(self, step: StepState, call: dict[str, Any], result: Any,
                            error: str | None) -> dict[str, Any]:
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
                            tripwire: dict[str, Any] | None = None) -> None:
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
        except Exception:
            log.warning("process_output_result raised on a failed run", exc_info=True)
        await self._finish_chunk(step, "error", finish_reason="error")


def _calls_first(processed: list[AttrDict]) -> bool:
    """Did a tool call's input begin streaming before the step's first text?"""
    kinds = [p["type"] for p in processed]
    first_text = kinds.index("text-delta") if "text-delta" in kinds else len(kinds)
    return any(k in ("tool-call-input-streaming-start", "tool-call") for k in kinds[:first_text])
