"""Stage 1 of an attempt: what the model is asked (Mastra's ``processInputStep`` and
``processLLMRequest``). The system messages reset to their step-0 snapshot, the fallback list
resolved once, the input step processors' overrides folded in, the structured-output schema
checked, the active tools picked and the prompt built. No chunk is emitted here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from threadline._internal.usercode import call_user
from threadline.events.json_types import JSONObject, JSONValue
from threadline.runtime.messages import MessageList, user_first
from threadline.runtime.model import prompt_parts, structured
from threadline.runtime.model.model_calls import DEFAULT_MAX_RETRIES, ModelCaller, ModelChoice, ModelLimiter, RetryPolicy
from threadline.runtime.step.ports import ModelFn
from threadline.runtime.step.state import StepState
from threadline.runtime.sub_agents import Pending
from threadline.runtime.tools import Tool


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSetup:
    """The worker's model settings, the same for every step it runs."""

    fn: ModelFn
    """The model function (:func:`~threadline.runtime.model.llm.stream_model` in a worker)."""
    default_model: str
    """The model when neither the agent nor a processor names one."""
    api_base: str | None
    """The OpenAI-compatible base URL for local models (``None``: the provider's)."""
    timeout_s: float
    """Seconds a model call may take."""
    retry_policy: RetryPolicy
    """Waits between model-level retries (docs/models.md)."""
    max_retries: int = DEFAULT_MAX_RETRIES
    """Retries when neither the fallback entry, the call nor the agent sets any."""
    limiter: ModelLimiter | None = None
    """Cluster-wide provider limits (``None``: none)."""

    def caller(self, step: StepState, options: dict[str, Any], model: str, chosen: ModelChoice) -> ModelCaller:
        """The model call of an attempt: the fallback list from the model in use, or only the
        model a processor chose. Retries: the entry's, else the call's ``max_retries`` (or
        ``model_settings.maxRetries``), else the agent's, else the worker's default."""
        settings = options.get("model_settings") or {}
        default = options.get("max_retries", settings.get("maxRetries", settings.get("max_retries")))
        if default is None:
            default = step.agent.max_retries if step.agent.max_retries is not None else self.max_retries
        assert step.models is not None
        if model == chosen.model:
            return ModelCaller(self.fn, step.models, default_retries=int(default), policy=self.retry_policy,
                               start=step.model_index, limiter=self.limiter)
        return ModelCaller(self.fn, [ModelChoice(model, chosen.max_retries)], default_retries=int(default),
                           policy=self.retry_policy, limiter=self.limiter)


@dataclass(slots=True, kw_only=True)
class ModelRequest:
    """What one attempt asks the model, after the input step and request processors."""

    model: str
    """The model asked first (a processor's choice, or the fallback entry in use)."""
    caller: ModelCaller
    """The call, with its retries and fallbacks."""
    prompt: list[dict[str, Any]]
    """The messages sent: the system messages (with their ``providerOptions``), then the list's."""
    tools: dict[str, Tool]
    """The active tools by name."""
    tool_choice: JSONValue
    """``auto``, ``none``, ``required`` or ``{type: tool, toolName}`` (``None``: the provider's)."""
    model_settings: JSONObject | None
    """Temperature, max tokens and the like, as the call gave them."""
    provider_options: JSONObject | None
    """Per-provider options, as the call gave them."""
    spec: structured.OutputSpec | None
    """The structured output asked for (``None``: text)."""
    cached: object = None
    """A response a ``process_llm_request`` processor returned (``{chunks: [...]}``): replayed,
    the model is not called."""


async def prepare(step: StepState, options: dict[str, Any], setup: ModelSetup) -> ModelRequest:
    """The attempt's request. Raises what the processors raise (a
    :class:`~threadline.runtime.processor.TripWire`) and
    :class:`~threadline.errors.ModelCallError` for a bad structured-output schema."""
    runner, ml, step_no = step.runner, step.ml, step.run.step
    step.children = Pending()
    step.approvals = []
    ml.replace_all_system_messages(step.state.system_snapshot or [])
    chosen = await _chosen(step, setup.default_model)
    step_input: dict[str, Any] = {
        "model": chosen.model, "tools": dict(step.tools if step.tools is not None else step.agent.tools),
        "tool_choice": options.get("tool_choice"), "active_tools": options.get("active_tools"),
        "provider_options": options.get("provider_options"), "model_settings": options.get("model_settings"),
        "structured_output": options.get("structured_output"),
    }
    step_input = await runner.process_input_step(ml, step_input, step_number=step_no, steps=step.steps)
    model = step_input.get("model") or setup.default_model
    caller = setup.caller(step, options, model, chosen)
    spec = structured.resolve(step_input.get("structured_output"))  # a bad schema fails here, clearly
    tools = dict(step_input.get("tools") or {})
    if step_input.get("active_tools") is not None:
        tools = {k: v for k, v in tools.items() if k in step_input["active_tools"]}
    prompt, cached = await runner.process_llm_request(_prompt(ml), model=model, step_number=step_no,
                                                      steps=step.steps)
    prompt = prompt_parts.to_chat(prompt)  # a prompt returned in Mastra's part shape is taken too
    return ModelRequest(model=model, caller=caller, prompt=prompt, tools=tools,
                        tool_choice=step_input.get("tool_choice"), model_settings=step_input.get("model_settings"),
                        provider_options=step_input.get("provider_options"), spec=spec, cached=cached)


async def _chosen(step: StepState, default_model: str) -> ModelChoice:
    """The fallback entry in use, the run's list resolved at its first attempt."""
    agent, context = step.agent, step.runner.request_context
    if step.models is None:
        step.models = (agent.resolve_models(default_model, context)
                       if isinstance(agent.model, str)  # else a function (user code) may be called
                       else await call_user(agent.resolve_models, default_model, context))
    return step.models[step.model_index]


def _prompt(ml: MessageList) -> list[dict[str, Any]]:
    """The system messages (instructions keep their ``providerOptions``), then the conversation
    (starting with the user's, :func:`~threadline.runtime.messages.user_first`)."""
    return user_first([{"role": "system", "content": m["content"],
                        **({"providerOptions": m["providerOptions"]} if m.get("providerOptions") else {})}
                       for m in ml.all_system_messages()] + ml.get.all.core())
