"""Dynamic configuration (Mastra's Agent options given as a function of the request context):
an agent's ``model``, ``tools``, ``workflows``, ``default_options``, ``memory``, ``metadata`` and processor
lists resolved for one run. Each function may be plain (run off the event loop) or ``async``.

The worker resolves them once per run: at the run's first step on a worker, then kept for the
run's later steps there (:class:`ConfigCache`); a worker that takes the run over resolves them
again from the same request context. The instructions are resolved at step 0 only (their
system messages are stored with the run's state).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from threadline._internal.usercode import call_user
from threadline.errors import ConfigurationError
from threadline.events.json_types import JSONObject
from threadline.logging import get_logger
from threadline.orchestration.options import normalize_options
from threadline.runtime.agent import Agent, normalize_instructions, tool_dict
from threadline.runtime.editor import EditorOverrides, strip
from threadline.runtime.memory import Memory, memory_config
from threadline.runtime.model.model_calls import ModelChoice, fallback_list
from threadline.runtime.processor import PrepareStep, ProcessorLike, ProcessorRunner
from threadline.runtime.processor_lists import check_processor_list, resolve_list
from threadline.runtime.sub_agents import sub_agent_tools
from threadline.runtime.tools import Tool
from threadline.runtime.workflows import workflow_tools


@dataclass(frozen=True, slots=True)
class RunConfig:
    """An agent's configuration for one run, every function of the request context resolved."""

    models: list[ModelChoice]
    """The fallback list (one entry for a single model)."""
    tools: dict[str, Tool]
    default_options: dict[str, Any]
    """Normalised option names (``max_steps``, …)."""
    memory: Memory
    metadata: JSONObject
    processors: dict[str, list[ProcessorLike] | Callable[..., object]] = field(default_factory=dict)
    """``{"input" | "output" | "error": list}``: the agent's processor lists."""
    stream_parts: dict[int, dict[str, list[Any]]] = field(default_factory=dict)
    """The parts each output processor's ``process_output_stream`` saw, by step, on this worker
    (``threadline.runtime.step.stream_parts``): a later step's ``stream_parts`` start from them."""


async def _value(value: object, request_context: Mapping[str, object]) -> Any:
    """``value``, or what the function ``value(request_context)`` returns (awaited when async)."""
    return await call_user(value, dict(request_context)) if callable(value) else value


async def _models(model: object, default: str, request_context: Mapping[str, object]) -> list[ModelChoice]:
    """The fallback list, each function entry resolved (a function may also return a list)."""
    model = await _value(model, request_context)
    if isinstance(model, list | tuple):
        entries = []
        for entry in model:
            if isinstance(entry, Mapping) and callable(entry.get("model")):
                entry = {**entry, "model": await _value(entry["model"], request_context)}
            entries.append(await _value(entry, request_context))
        model = entries
    return fallback_list(model, default, dict(request_context))


async def resolve_config(agent: Agent, request_context: Mapping[str, object], default_model: str) -> RunConfig:
    """Resolve ``agent``'s options for one run.

    Raises:
        ConfigurationError: a function returned a value its option does not take.
        Exception: whatever a user function raises.
    """
    dyn = agent.dynamic
    tools = tool_dict(await _value(dyn["tools"], request_context), agent.id) if "tools" in dyn else agent.tools
    if "tools" in dyn or "workflows" in dyn:  # the workflows' tools (decision 80)
        found_wf = await _value(dyn["workflows"], request_context) if "workflows" in dyn else None
        tools = {**tools, **agent.workflow_tools, **workflow_tools(found_wf, f"agent {agent.id}")}
    subs = await _value(dyn["agents"], request_context) if "agents" in dyn else agent.agents
    if subs:  # each sub-agent is the tool agent-<key> (decision 76)
        tools = {**tools, **sub_agent_tools(subs, agent.id)}
    defaults = agent.default_options
    if "default_options" in dyn:
        found = await _value(dyn["default_options"], request_context)
        if not isinstance(found, Mapping | None):
            raise ConfigurationError(f"agent {agent.id}: default_options function returned {type(found).__name__}")
        defaults = normalize_options(found)
    memory = memory_config(await _value(dyn["memory"], request_context), where=f"agent {agent.id}: memory") \
        if "memory" in dyn else agent.memory
    metadata: Any = agent.metadata
    if "metadata" in dyn:
        metadata = await _value(dyn["metadata"], request_context)
        if not isinstance(metadata, Mapping | None):
            raise ConfigurationError(f"agent {agent.id}: metadata function returned {type(metadata).__name__}")
    processors = {}
    for kind, plist in (("input", agent.input_processors), ("output", agent.output_processors),
                        ("error", agent.error_processors)):
        found = await _value(plist, request_context)
        processors[kind] = check_processor_list(list(found or []), kind, agent_id=agent.id)
    return RunConfig(models=await _models(agent.model, default_model, request_context), tools=tools,
                     default_options=dict(defaults), memory=memory, metadata=dict(metadata or {}),
                     processors=processors)


async def system_messages(agent: Agent, request_context: Mapping[str, object]) -> list[dict[str, Any]]:
    """The agent's instructions as system messages (a function of the request context resolved;
    plain or async).

    Raises:
        ConfigurationError: the instructions are not a string, system message or list of them.
    """
    if not agent.dynamic_instructions:
        return agent.system_messages(dict(request_context))
    return normalize_instructions(await _value(agent._instructions, request_context))


async def run_system_messages(agent: Agent, request_context: Mapping[str, object],
                              editor: Mapping[str, object], instructions: object = None) -> list[dict[str, Any]]:
    """A run's system messages at step 0: the call's ``instructions`` option when given (it
    replaces the agent's, as Mastra's), else the editor's stored instructions when ``editor``
    (the run's overrides, :func:`editor_overrides`) has them (decision 69), else
    :func:`system_messages`.

    Raises:
        ConfigurationError: as :func:`system_messages`, or instructions of another shape.
    """
    if instructions is not None:
        return normalize_instructions(instructions)
    if editor.get("instructions") is not None:
        return normalize_instructions(editor["instructions"])
    return await system_messages(agent, request_context)


def processor_runner(options: Mapping[str, Any], config: RunConfig, request_context: dict[str, Any],
                     agent_id: str, catalogue: Mapping[str, object] | None, *, states: dict[str, Any],
                     retry_count: int) -> ProcessorRunner:
    """The step's processor runner: the call's processor lists (``options``) or the run's resolved
    ones (``config.processors``), ``prepare_step`` after the input processors; ``catalogue`` maps
    registered processor ids to processors.

    Raises:
        ConfigurationError: a processor list entry that is neither a processor nor a known id.
    """
    def listed(kind: str) -> list[ProcessorLike]:
        return resolve_list(options.get(f"{kind}_processors", config.processors[kind]), kind, request_context,
                            agent_id, catalogue)

    inputs = listed("input")
    if callable(options.get("prepare_step")):  # runs after the input processors
        inputs.append(PrepareStep(options["prepare_step"]))
    return ProcessorRunner(input_processors=inputs, output_processors=listed("output"),
                           error_processors=listed("error"), states=states, request_context=request_context,
                           retry_count=retry_count)


def editor_overrides(agent: Agent, tools: Mapping[str, Tool], stored: Mapping[str, object] | None) -> EditorOverrides:
    """The agent's stored editor overrides (``stored``, read by the claim of the run's step 0,
    decision 95), what its ``editor`` option locks and tools it does not define stripped
    (:func:`threadline.runtime.editor.strip`); ``{}`` when there are none or the agent is locked."""
    if agent.editor.locked or not stored:
        return {}
    kept, stripped = strip(agent.editor, stored, None if "tools" in agent.dynamic else tools)
    if stripped:
        get_logger(__name__).info("editor overrides stripped", agent_id=agent.id, fields=stripped[:10])
    return kept


class ConfigCache:
    """Resolved configurations by run id, the most recent ``size`` runs (a run's later steps on
    this worker reuse what its first step here resolved)."""

    def __init__(self, size: int = 2048) -> None:
        self._size = size
        self._runs: OrderedDict[str, RunConfig] = OrderedDict()

    async def get(self, run_id: str, agent: Agent, request_context: Mapping[str, object], default_model: str) -> RunConfig:
        """The run's configuration, resolved on first use (see :func:`resolve_config`)."""
        found = self._runs.get(run_id)
        if found is None:
            found = await resolve_config(agent, request_context, default_model)
            self._runs[run_id] = found
            while len(self._runs) > self._size:
                self._runs.popitem(last=False)
        else:
            self._runs.move_to_end(run_id)
        return found

    def drop(self, run_id: str) -> None:
        """Forget a run (it ended)."""
        self._runs.pop(run_id, None)
