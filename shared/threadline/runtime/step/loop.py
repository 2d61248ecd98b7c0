"""One step of a run: the agentic loop (processors, the model call, tools), against the ports of
:mod:`threadline.runtime.step.ports` — where the step's state is loaded and saved, where its chunks
go, and the model function. No SQL, no Kafka here.

One step (the attempt's stages, each returning a value: :func:`~.prepare.prepare` →
:func:`~.respond.respond` → :func:`~.tools.run_tools` → :func:`~.conclude.conclude`):
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

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from threadline._internal.faults import pause_point
from threadline.config import DEFAULT_SUB_AGENT_MAX_DEPTH, DEFAULT_TOOL_TIMEOUT_S
from threadline.errors import ModelCallError
from threadline.events import chunks
from threadline.events.json_types import JSONObject
from threadline.events.messages import as_stored, now_ms
from threadline.events.signals import signal_to_message
from threadline.ids import new_id
from threadline.logging import get_logger
from threadline.runtime.agent import Agent
from threadline.runtime.dynamic import ConfigCache, editor_overrides, processor_runner, run_system_messages
from threadline.runtime.editor import tool_descriptions, with_descriptions
from threadline.runtime.memory import Memory, for_run, recent
from threadline.runtime.messages import MessageList
from threadline.runtime.model.llm import stream_model
from threadline.runtime.model.model_calls import DEFAULT_MAX_RETRIES, ModelLimiter, RetryPolicy
from threadline.runtime.processor import ProcessorRunner, TripWire
from threadline.runtime.processor_args import AbortSignal
from threadline.runtime.refs import resolve_options
from threadline.runtime.registry import Catalogue
from threadline.runtime.step.approvals import resume_approvals
from threadline.runtime.step.children import resume_children
from threadline.runtime.step.conclude import Attempted, conclude, finish_seen
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
from threadline.runtime.step.prepare import ModelSetup, prepare
from threadline.runtime.step.respond import add_error_parts, respond
from threadline.runtime.step.retry import add_feedback, retry_step_finish, tripwire_step_finish
from threadline.runtime.step.state import StepState, StepWriter, error_view, final_text, mark_boundary
from threadline.runtime.step.stream_parts import keep_step, parts_before
from threadline.runtime.step.tools import run_tools, step_hooks
from threadline.runtime.transform import transcript_entries
from threadline.transient import is_transient

log = get_logger(__name__)


def model_error(exc: ModelCallError) -> JSONObject:
    """The failed run's ``error``: what the provider said as Mastra reports it (``name``, ``url``,
    ``responseBody``, ``data``…: ``exc.provider``), then Threadline's ``{kind, message, statusCode,
    retryable, retry_after_s?}`` (docs/decisions.md#model-error-payload)."""
    error: JSONObject = {**(exc.provider or {}), "kind": exc.kind, "message": str(exc), "statusCode": exc.status_code,
                         "retryable": exc.retryable}
    if exc.retry_after_s is not None:
        error["retry_after_s"] = exc.retry_after_s
    return error


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
        tool_timeout_s: seconds a tool call (or workflow step) that sets no ``timeout_s`` may
            run (``None``: no bound; decision 218).
        sub_agent_max_depth: how deep a sub-agent tree may grow (decision 219).
    """

    def __init__(self, *, default_model: str, model_api_base: str | None, model_timeout_s: float,
                 catalogue: Catalogue | None = None, model: ModelFn = stream_model,
                 retry_policy: RetryPolicy | None = None, max_retries: int = DEFAULT_MAX_RETRIES,
                 limiter: ModelLimiter | None = None, tool_timeout_s: float | None = DEFAULT_TOOL_TIMEOUT_S,
                 sub_agent_max_depth: int = DEFAULT_SUB_AGENT_MAX_DEPTH) -> None:
        self._tool_timeout_s = tool_timeout_s
        self._sub_agent_max_depth = sub_agent_max_depth
        self._setup = ModelSetup(fn=model, default_model=default_model, api_base=model_api_base,
                                 timeout_s=model_timeout_s, retry_policy=retry_policy or RetryPolicy(),
                                 max_retries=max_retries, limiter=limiter)
        self._default_model = default_model
        self._catalogue = catalogue or Catalogue()
        self._configs = ConfigCache()
        self._signals: dict[str, AbortSignal] = {}  # the abort signal of each run whose step runs here

    def abort(self, run_id: str, reason: str = "aborted") -> None:
        """The run was aborted: its step's processors see ``abort_signal.aborted`` (call it before
        cancelling the step's task). Nothing when no step of the run runs here."""
        signal = self._signals.get(run_id)
        if signal is not None:
            signal.abort(reason)

    async def run(self, run: StepRun, agent: Agent, inputs: StepInputs, sink: ChunkSink,
                  store: StepStore) -> StepOutcome:
        """Execute the step, stream its chunks to ``sink`` and save it through ``store``.

        A failing step fails its run (the outcome says so); transient infrastructure faults and
        :class:`~threadline.errors.StaleWriterError` propagate (the step is re-executed or was
        taken over).
        """
        step, options, memory = await self._open(run, agent, inputs, sink)
        self._signals[run.run_id] = step.runner.abort_signal
        try:
            return await self._run(step, options, memory, inputs, store)
        finally:
            self._signals.pop(run.run_id, None)

    async def _run(self, step: StepState, options: dict[str, Any], memory: Memory, inputs: StepInputs,
                   store: StepStore) -> StepOutcome:
        run, sink = step.run, step.writer
        answered = bool(run.state.approval_calls)
        if run.step == 0:
            await sink.emit(chunks.start_chunk(step.agent.id, step.response_id))
        elif run.state.sub_agent_calls or answered:  # the suspended step's calls first
            hooks = step_hooks(step, options, self._catalogue.hooks)
            if run.state.sub_agent_calls:  # the children ended: their results
                await resume_children(step, store, hooks)
            if answered:  # every held call answered: approved ones run now (decision 226)
                await resume_approvals(step, store, hooks)
        # a drained signal starts a new assistant message after it; so does a run resumed after an
        # approval, as Mastra's resumed run answers in a new message (decision 226)
        if run.step > 0 and (inputs.signals or answered):
            mark_boundary(step)
            step.response_id = new_id("msg")
        consumed = []
        for sig in inputs.signals:
            step.ml.add(signal_to_message(sig.payload, thread_id=run.thread_id, resource_id=run.resource_id),
                        "input")
            consumed.append(sig.id)
        step.echoes = [chunks.echo_chunk(sig.payload) for sig in inputs.signals]
        outcome = await self._outcome(step, options, consumed, store)
        keep_step(step.kept_parts, run.step, step.runner.stream_parts, step.parts_base)
        await sink.flush()
        await self._save(step, outcome, memory, consumed, store)
        return outcome

    async def _open(self, run: StepRun, agent: Agent, inputs: StepInputs,
                    sink: ChunkSink) -> tuple[StepState, dict[str, Any], Memory]:
        """Step 1 of the module docstring: the run's configuration, options, processors and
        message list (the thread history and instructions at step 0, the stored list after)."""
        state = run.state
        request_context = {**(run.options.get("request_context") or agent.default_options.get("request_context")
                              or {}), "thread_id": run.thread_id, "resource_id": run.resource_id}
        # the options given as functions of the request context, resolved once per run on this worker
        cfg = await self._configs.get(run.run_id, agent, request_context, self._default_model)
        options = resolve_options({**cfg.default_options, **run.options}, self._catalogue.module)
        # a crashed retry attempt spent its share of the budget: requests stay capped
        runner = processor_runner(options, cfg, request_context, agent.id, self._catalogue.processors,
                                  states=state.processor_state,
                                  retry_count=state.retry_count + (1 if inputs.restarted and state.retry_count else 0))
        memory = for_run(cfg.memory, options.get("memory_options"))
        if run.step == 0:
            ml = MessageList(thread_id=run.thread_id, resource_id=run.resource_id)
            ml.add(recent(inputs.history, memory), "memory")
            # the editor's overrides as stored now, locked fields stripped; kept with the run (decision 69)
            state.editor = editor_overrides(agent, cfg.tools, inputs.overrides)
            for sm in await run_system_messages(agent, request_context, state.editor, options.get("instructions")):
                ml.add_system(sm)  # instructions given as a plain function ran off the event loop
            response_id = new_id("msg")
        else:
            ml = MessageList.from_state(state.message_list or {}, thread_id=run.thread_id,
                                        resource_id=run.resource_id, live=state.live)
            response_id = state.response_message_id or new_id("msg")
        step = StepState(run=run, agent=agent, writer=sink, ml=ml, runner=runner, response_id=response_id,
                         require_tool_approval=bool(options.get("require_tool_approval")),
                         steps=state.steps, state=state, usage_total=state.usage, recorded=inputs.recorded,
                         models=list(cfg.models), tools=with_descriptions(cfg.tools, tool_descriptions(state.editor)),
                         agent_metadata=cfg.metadata, tool_timeout_s=self._tool_timeout_s,
                         sub_agent_max_depth=self._sub_agent_max_depth)
        runner.writer = StepWriter(step, through_processors=False)
        # streamParts across steps: the parts this worker's earlier steps of the run saw (decision 167)
        runner.stream_parts = parts_before(cfg.stream_parts, run.step)
        step.kept_parts, step.parts_base = cfg.stream_parts, {k: len(v) for k, v in runner.stream_parts.items()}
        return step, options, memory

    async def _outcome(self, step: StepState, options: dict[str, Any], consumed: list[str],
                       store: StepStore) -> StepOutcome:
        """Steps 3–7 of the module docstring, and how the step ended: a tripwire, a failed model
        call or a failing step end the run (their chunks emitted here); transient faults raise."""
        try:
            done = await self._step(step, options, consumed, store)
        except TripWire as tw:
            trip = Trip(tw.payload())
            log.info("tripwire", run_id=step.run.run_id, processor_id=tw.processor_id, reason=tw.reason)
            if not step.judging:
                # a blocked run stores nothing, as Mastra's: neither its reply nor its input (else the
                # tripped input reaches the model on the thread's next turn); stored steps are deleted
                step.ml.remove_by_ids([m["id"] for m, source in step.ml.entries() if source != "memory"])
            else:  # process_output_step rejected the model's finished step: Mastra keeps the run's
                # messages, the rejected answer too (decision 170), and its step-finish says how (123),
                finished = tripwire_step_finish(step.response_id, step.attempt_output)
                await step.writer.emit(finished)
                step.last_step_finish = finished["payload"]  # and the finish repeats its fields
            await step.writer.emit(chunks.tripwire_chunk(trip.tripwire))
            await self._finish_chunk(step, "tripwire", finish_reason="other", tripwire=trip.tripwire)
            return trip
        except ModelCallError as exc:
            log.warning("model call failed; the run fails", kind=exc.kind, error=str(exc)[:300])
            failed = Fail(model_error(exc))
            add_error_parts(step, failed.error)  # stored with the run's input, as Mastra's (decision 170)
        except Exception as exc:
            if is_transient(exc):  # not the run's fault: re-executed, not failed
                raise
            log.exception("step failed", run_id=step.run.run_id, step=step.run.step)
            failed = Fail({"kind": "internal", "message": f"{type(exc).__name__}: {exc}"})
        else:
            if step.children.requests or step.approvals:  # waits for child runs or approvals
                return Suspend(done.finish_reason)
            return Continue(done.finish_reason) if done.continued else Finish(done.finish_reason)
        await self._fail(step, failed.error)
        return failed

    async def _save(self, step: StepState, outcome: StepOutcome, memory: Memory, consumed: list[str],
                    store: StepStore) -> None:
        """Step 8 of the module docstring: the state written back, then the step saved with its
        held ``finish`` (decision 19), which the sink then counts as stored."""
        run, state, sink = step.run, step.run.state, step.writer
        at = now_ms()
        for msg, source in step.ml.entries():
            if source != "memory":  # the run's own messages take Mastra's stored shape
                as_stored(msg, at)
        state.message_list = step.ml.to_state()
        state.retry_count = step.runner.retry_count
        state.response_message_id = step.response_id
        suspended = isinstance(outcome, Suspend)
        final = not isinstance(outcome, Continue | Suspend)
        state.sub_agent_calls = step.children.calls if suspended else None
        state.approval_calls = step.approvals if suspended else None
        await pause_point("before_step_result_write", run.thread_id)
        held = sink.held  # the finish, published once stored (decision 19)
        # read-only memory, or memory off: the run's messages are not written to the thread
        entries: Sequence[tuple[Mapping[str, object], str]] = step.ml.entries() if memory.stores else []
        if entries and step.transforms:  # the stored transcript as the transforms show it (decision 72)
            entries = await transcript_entries(entries, step.tools if step.tools is not None else step.agent.tools,
                                               step.agent.transform)
        await store.save(StepRecord(run=run, attempt=sink.attempt, outcome=outcome, entries=entries,
                                    consumed=consumed, state=state.dump(), next_seq=sink.seq,
                                    text=final_text(step) if final else None, usage=step.usage_total,
                                    finish=held, children=step.children.requests if suspended else [],
                                    approvals=step.approvals if suspended else []))
        if final:
            self._configs.drop(run.run_id)
        if held is not None:
            sink.finish_stored()

    async def _step(self, step: StepState, options: dict[str, Any], consumed: list[str],
                    store: StepStore) -> Attempted:
        """Steps 3–7 of the module docstring, with processor retries.

        A retry (``abort(..., retry=True)`` or ``process_api_error`` → ``{retry: True}``) happens
        only while ``retry_count < cap``: the attempt ends with Mastra's ``step-finish``
        (``stepResult.reason: "retry"``) and is declared dead on the stream
        (``attempt-discarded``), its output is rolled back, a tripwire's reason is added as
        feedback (a system message), and the step runs again under the next attempt number.
        ``retry_count`` counts the run's retries (Mastra's "for this generation").
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
            step.attempt_output, step.judging = None, False
            try:
                done = await self._attempt(step, options, consumed, store)
                break
            except TripWire as tw:
                if not tw.retry or cap is None or runner.retry_count >= cap:
                    raise
                feedback: TripWire | None = tw
                ml = self._restore(step, saved)
                retry = {"retryProcessorId": tw.processor_id, "retryReason": tw.reason, "retryMetadata": tw.metadata}
            except ModelCallError as exc:
                # the attempt's own additions are dropped first: the error processors edit the
                # list the failed request was built from, and their edits reach the retried request
                ml = self._restore(step, saved)
                feedback = None
                if exc.streamed and step.next_model():  # the model died mid-answer: the next one takes over
                    await self._discard(step, store, "fallback", None)
                    continue
                if (asked := await self._asked_retry(step, exc, cap)) is None:
                    raise
                retry = asked
            await self._retried(step, store, retry, feedback, cap)
        if not done.continued:
            answered = final_text(step)
            await self._output_result(step, done.finish_reason)
            finish = step.finish or await finish_seen(step, done.finish_reason)
            if (edited := final_text(step)) != answered:  # Mastra's result.text is the edited answer (decision 165)
                finish["payload"]["text"] = edited
            await step.writer.emit(finish)
        return done

    @staticmethod
    def _restore(step: StepState, saved: bytes) -> MessageList:
        """The step's message list as it was before the attempt (``saved``: its state as JSON)."""
        step.ml = MessageList.from_state(orjson.loads(saved), thread_id=step.run.thread_id,
                                         resource_id=step.run.resource_id)
        return step.ml

    @staticmethod
    async def _asked_retry(step: StepState, exc: ModelCallError, cap: int | None) -> dict[str, Any] | None:
        """The retry ``process_api_error`` asks for the failed model call ``exc`` (Mastra's
        ``stepResult`` retry fields), while the run's retries are under ``cap``; ``None``: no retry."""
        runner = step.runner
        if cap is None or runner.retry_count >= cap:
            return None
        asked = await runner.process_api_error(step.ml, error=error_view(exc), step_number=step.run.step,
                                               steps=step.steps)
        if not asked:
            return None
        return {"retryProcessorId": asked["processorId"], "retryReason": f"api-error: {exc.kind}",
                "retryMetadata": asked["metadata"]}

    async def _retried(self, step: StepState, store: StepStore, retry: dict[str, Any],
                       feedback: TripWire | None, cap: int | None) -> None:
        """End a rejected attempt as Mastra shows it (``step-finish`` with ``reason: "retry"``; the
        retry fields only for a processor's abort), declare it dead, and add a tripwire's reason
        as feedback for the next attempt (decision 120)."""
        runner = step.runner
        runner.retry_count += 1
        await step.writer.emit(retry_step_finish(step.response_id, retry if feedback else None,
                                                 step.attempt_output, retry_count=runner.retry_count))
        await self._discard(step, store, feedback.reason if feedback else "api-error", retry)
        if feedback is not None:
            add_feedback(step.ml, feedback.reason)
        log.info("step retried", retry_count=runner.retry_count, cap=cap, attempt=step.writer.attempt,
                 processor_id=retry["retryProcessorId"])

    async def _discard(self, step: StepState, store: StepStore, reason: str, retry: dict[str, Any] | None) -> None:
        """Declare the current attempt dead on the stream and continue under the next one."""
        dead = step.writer.attempt
        step.writer.attempt += 1
        await store.restart_attempt(step.run, step.writer.attempt, step.runner.retry_count)
        await step.writer.emit(chunks.attempt_discarded_chunk(step.run.step, dead, reason, retry))

    def _retry_cap(self, options: dict[str, Any], agent: Agent, runner: ProcessorRunner) -> int | None:
        cap: int | None = options.get("max_processor_retries", agent.max_processor_retries)
        if cap is None and runner.error:
            cap = 10
            log.warning("implicit retry cap applied: error processors and no max_processor_retries",
                        cap=cap)
        return cap

    async def _attempt(self, step: StepState, options: dict[str, Any], consumed: list[str],
                       store: StepStore) -> Attempted:
        """One attempt of the step, in four stages each returning a value: the request, the
        model's response, the tools' results, the step's conclusion."""
        request = await prepare(step, options, self._setup)
        response = await respond(step, request, self._setup)
        hooks = step_hooks(step, options, self._catalogue.hooks)
        results = await run_tools(step, response, request.tools, hooks, store)
        return await conclude(step, request, response, results, options, consumed, store)

    async def _output_result(self, step: StepState, finish_reason: str) -> None:
        await step.runner.process_output_result(step.ml, result={
            "text": final_text(step), "usage": step.usage_total, "finishReason": finish_reason,
            "steps": step.steps})

    async def _finish_chunk(self, step: StepState, reason: str, *, finish_reason: str,
                            tripwire: JSONObject | None = None) -> None:
        # after the step's step-finish (an abort in process_output_result), the finish repeats it
        await step.writer.emit(await finish_seen(step, reason, finish_reason=finish_reason, tripwire=tripwire,
                                                 after_step=step.last_step_finish is not None))

    async def _fail(self, step: StepState, error: JSONObject) -> None:
        await step.writer.emit(chunks.error_chunk(error))
        await step.writer.emit(chunks.step_finish_chunk(step.response_id, reason="error", is_continued=False,
                                                        text=None, usage=None, has_text=False))
        try:
            await self._output_result(step, "error")
        except Exception:
            log.warning("process_output_result raised on a failed run", exc_info=True)
        await self._finish_chunk(step, "error", finish_reason="error")

