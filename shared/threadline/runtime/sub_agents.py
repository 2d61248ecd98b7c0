"""Sub-agents as tools (Mastra's Agent option ``agents``; decisions 76-79).

Each sub-agent under key ``k`` is exposed to the model as the tool ``agent-k`` (Mastra's naming)
taking ``{"prompt": str}``. A call never runs inline: the worker records it with the step
(:class:`ChildRequest`), the step ends ``suspended``, the orchestrator starts the child run (its
own thread, linked by ``parent_run_id``) and, once every child of the step ended, schedules the
parent's next step, which begins by putting the children's results into the invocations.

Pure helpers here; the writes are in :mod:`threadline.store.sub_agents`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import orjson

from threadline.errors import ConfigurationError
from threadline.events.chunk_types import ToolCallPayload
from threadline.events.json_types import JSONObject
from threadline.orchestration.children import ChildRequest
from threadline.runtime.sub_agent_names import TOOL_PREFIX
from threadline.runtime.tools import JSON_SCHEMA_DRAFT_07, Tool


@runtime_checkable
class SubAgent(Protocol):
    """What a sub-agent tool reads of an agent (a :class:`~threadline.runtime.agent.Agent`; this
    module does not import the class, which imports it)."""

    id: str
    name: str
    description: str


INPUT_SCHEMA: JSONObject = {
    "$schema": JSON_SCHEMA_DRAFT_07,
    "type": "object",
    "properties": {"prompt": {"type": "string", "description": "The prompt to send to the agent"}},
    "required": ["prompt"],
    "additionalProperties": False,
}
"""The arguments of a sub-agent tool: Mastra's ``prompt`` only, in the shape Mastra sends a tool
schema (Mastra's other, optional arguments are not offered: docs/decisions.md#sub-agent-input)."""


def _not_inline(*_: object) -> object:
    raise RuntimeError("a sub-agent call runs as a child run, never inline")


@dataclass
class SubAgentTool(Tool):
    """The tool standing for one sub-agent; the step loop recognises it and suspends the step.

    Attributes:
        agent_id: the sub-agent's id (the child run's agent; it must be served by the agents module).
        key: the key under ``agents`` (the tool is ``agent-<key>``).
    """

    agent_id: str = ""
    key: str = ""


def sub_agent_tools(agents: object, parent_id: str) -> dict[str, Tool]:
    """``{"agent-<key>": SubAgentTool}`` for an ``agents`` mapping (``None``: none).

    Raises:
        ConfigurationError: not a mapping of keys to :class:`~threadline.runtime.agent.Agent`, or a
            key that is not ``[a-zA-Z0-9_-]+``.
    """
    if agents is None:
        return {}
    if not isinstance(agents, Mapping):
        raise ConfigurationError(f"agent {parent_id}: agents must be a dict of Agent, got {type(agents).__name__}")
    out: dict[str, Tool] = {}
    for key, sub in agents.items():
        if not isinstance(sub, SubAgent):
            raise ConfigurationError(f"agent {parent_id}: agents[{key!r}] is a {type(sub).__name__}, not an Agent")
        name = f"{TOOL_PREFIX}{key}"
        out[name] = SubAgentTool(id=name, description=sub.description or f"Ask the agent {sub.name}.",
                                 execute=_not_inline, input_schema=INPUT_SCHEMA, agent_id=sub.id, key=str(key))
    return out


def static_sub_agents(agents: Any, parent_id: str) -> dict[str, SubAgent]:
    """The ``agents`` option as given (a function: ``{}``, resolved per run). Raises as
    :func:`sub_agent_tools`."""
    if callable(agents) or agents is None:
        return {}
    sub_agent_tools(agents, parent_id)  # checked now
    return dict(agents)


CHILD_THREAD_MAX = 256
"""The longest child thread id: what ingress takes as a thread id, so a client can send to (or
abort) a child's thread by its id at any depth (decision 219)."""


def child_ids(parent_run_id: str, parent_thread_id: str, tool_name: str, tool_call_id: str) -> tuple[str, str]:
    """``(child run id, child thread id)``: the same for every re-execution of the parent step (the
    recorded model output keeps the tool call id), so the child exists once. The thread id is
    ``<parent thread>.<tool>.<call id>``; one longer than :data:`CHILD_THREAD_MAX` keeps its first
    characters and ends with ``~`` and 16 hex of the whole id's SHA-256 (distinct ids stay distinct)."""
    digest = hashlib.sha256(f"{parent_run_id}\x00{tool_call_id}".encode()).hexdigest()[:26]
    thread = f"{parent_thread_id}.{tool_name}.{tool_call_id}"
    if len(thread) > CHILD_THREAD_MAX:
        tail = hashlib.sha256(thread.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        thread = f"{thread[:CHILD_THREAD_MAX - 17]}~{tail}"
    return f"run_{digest}", thread


def prompt_of(args: object) -> str:
    """The child's input: the call's ``prompt`` (``message`` accepted), else the arguments as JSON."""
    if isinstance(args, Mapping):
        for k in ("prompt", "message"):
            if isinstance(args.get(k), str):
                return str(args[k])
    return orjson.dumps(args).decode() if args is not None else ""


@dataclass(slots=True)
class Pending:
    """The sub-agent calls of the step being executed that wait for their child run."""

    requests: list[ChildRequest] = field(default_factory=list)
    calls: list[ToolCallPayload] = field(default_factory=list)
    """``{toolCallId, toolName, args}`` of each, kept in the run state for the resumed step."""


def request_for(run_id: str, thread_id: str, tool: SubAgentTool, call: ToolCallPayload) -> ChildRequest:
    """The :class:`ChildRequest` of a model's call of ``tool``."""
    child_run, child_thread = child_ids(run_id, thread_id, tool.id, call["toolCallId"])
    return ChildRequest(tool_call_id=call["toolCallId"], tool_name=tool.id, agent_id=tool.agent_id,
                        child_run_id=child_run, child_thread_id=child_thread, prompt=prompt_of(call.get("args")))
