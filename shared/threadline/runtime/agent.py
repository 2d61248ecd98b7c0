"""The ``Agent`` (Mastra's Agent API, "Agent 類別"): instructions, model, tools and hooks, processors,
default options. Defined in plain Python in the agents module and loaded by every service.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from threadline.errors import ConfigurationError
from threadline.events.json_types import JSONObject
from threadline.orchestration.options import normalize_options
from threadline.runtime.memory import Memory, memory_config
from threadline.runtime.model.model_calls import ModelChoice, check_fallback_list, fallback_list
from threadline.runtime.processor_lists import check_processor_list
from threadline.runtime.scorers import ScorerEntry, scorer_entries
from threadline.runtime.tools import Tool, ToolHooks

ModelEntry = str | Mapping[str, object] | Callable[..., object]
"""One entry of a fallback list: a model string, a function of the request context answering
one, or ``{"model": either, "max_retries"?: int}`` (``maxRetries`` accepted)."""


def normalize_instructions(instructions: object) -> list[dict[str, Any]]:
    """Instructions (string, list of strings, system message, list of system messages) →
    system messages ``[{role: "system", content, providerOptions?}]``."""
    if instructions is None or instructions == "":
        return []
    items = instructions if isinstance(instructions, list) else [instructions]
    out = []
    for item in items:
        if isinstance(item, str):
            out.append({"role": "system", "content": item})
        elif isinstance(item, dict) and item.get("role", "system") == "system" and "content" in item:
            msg = {"role": "system", "content": item["content"]}
            opts = item.get("providerOptions") or item.get("provider_options")
            if opts:
                msg["providerOptions"] = opts
            out.append(msg)
        else:
            raise ConfigurationError("instructions must be a string, a system message "
                                     "{role: 'system', content}, or a list of them")
    return out


def tool_dict(tools: Any, agent_id: str) -> dict[str, Tool]:
    """A list of :class:`Tool` or ``{name: Tool}`` as ``{id: Tool}``.

    Raises:
        ConfigurationError: an entry that is not a :class:`Tool`.
    """
    if isinstance(tools, dict):
        for t in tools.values():
            if not isinstance(t, Tool):
                raise ConfigurationError(f"agent {agent_id}: tools must be Tool instances, got {type(t).__name__}")
        tools = [t if t.id == k else Tool(id=k, description=t.description, execute=t.execute,
                                          input_schema=t.input_schema, transform=t.transform)
                 for k, t in tools.items()]
    out: dict[str, Tool] = {}
    for t in tools or []:
        if not isinstance(t, Tool):
            raise ConfigurationError(f"agent {agent_id}: tools must be Tool instances, got {type(t).__name__}")
        out[t.id] = t
    return out


def _schema_checked(schema: object, agent_id: str) -> JSONObject | None:
    """A ``request_context_schema`` (JSON Schema) checked against its metaschema."""
    if schema is None:
        return None
    import jsonschema

    if not isinstance(schema, dict):
        raise ConfigurationError(f"agent {agent_id}: request_context_schema must be a JSON Schema (a dict)")
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ConfigurationError(f"agent {agent_id}: request_context_schema is not a valid JSON Schema: "
                                 f"{exc.message}") from exc
    return schema


class Agent:
    """An agent definition.

    Args:
        id: unique id; requests name it as ``agent_id``.
        name: display name (defaults to ``id``).
        description: what the agent is for.
        instructions: a string, list of strings, ``{role: "system", content, providerOptions}``,
            a list of those, or a function ``(request_context) -> any of these``.
        model: litellm router string ``provider/model`` (credentials from the environment),
            a function ``(request_context) -> str``, or a fallback list of strings /
            ``{"model": ..., "max_retries": n}`` tried in order (docs/models.md); ``None`` uses
            ``THREADLINE_MODEL``.
        max_retries: retries of one model on a transient error (rate limit, 5xx, timeout,
            connection); ``None``: ``THREADLINE_MODEL_MAX_RETRIES`` (default 2). A call's
            ``max_retries`` option and a fallback entry's ``max_retries`` take precedence.
        tools: list of :class:`Tool` or ``{name: Tool}``, or a function ``(request_context) -> either``.
        hooks: :class:`ToolHooks` or ``{"before_tool_call": f, "after_tool_call": g}``.
        input_processors, output_processors, error_processors: processor lists, or functions
            ``(request_context) -> list``.
        default_options: defaults for every run (``max_steps``, …; camelCase accepted), or a
            function ``(request_context) -> dict``.
        max_processor_retries: cap on processor-requested retries (docs/processors.md).
        memory: Mastra's memory options: ``None`` (the last 200 messages, stored), ``False``
            (memory off: no history, nothing stored), a :class:`~threadline.runtime.memory.Memory`
            or ``{"last_messages": N | False, "read_only": bool}`` (camelCase accepted).
        metadata: a dict clients read (``await client.agent(id).details()``), or a function
            ``(request_context) -> dict`` (resolved per run; clients then see ``dynamic_metadata``).
        request_context_schema: a JSON Schema the request context of every run is validated
            against when ingress receives the request (refused: ``invalid_request_context``).
        scorers: ``{name: {"scorer": f | judge(...), "sampling": rate | {"type": "ratio", "rate": r}}}``
            run after each finished run, off its path (:mod:`threadline.runtime.scorers`), or a
            function ``(request_context) -> that mapping``.
        voice: a :class:`~threadline.runtime.voice.Voice` or ``{"speak": {"model", "speaker"},
            "listen": {"model"}}``: text to speech and speech to text through litellm
            (:mod:`threadline.runtime.voice`); clients call it, no run is involved.
        transform: the tool payload transform policy ``{"transform_tool_payload": f, "targets":
            ["display", "transcript"]}`` (:mod:`threadline.runtime.transform`).
        workflows: ``{key: Workflow}`` (:mod:`threadline.runtime.workflows`), or a function
            ``(request_context) -> that mapping``: each is the tool ``workflow-<key>``, durable
            (a crash resumes after its last finished step; docs/workflows.md).
        editor: which fields stored editor overrides may change (Mastra's Editor):
            omitted — instructions and tool descriptions; ``False`` — nothing;
            ``{"instructions": False}`` / ``{"tools": {"description": False}}`` lock that field
            (:mod:`threadline.runtime.editor`). ``id``, ``name`` and ``model`` always come from code.
        agents: sub-agents ``{key: Agent}`` or a function ``(request_context) -> that dict``; each is
            the tool ``agent-<key>`` (``{"prompt": str}``) whose call runs as a durable child run
            (:mod:`threadline.runtime.sub_agents`, docs/agents.md).

    Every option given as a function of the request context (``instructions``, ``model``,
    ``tools``, ``default_options``, ``memory``, ``metadata``, processor lists) may be a plain or
    an ``async`` function; the worker resolves it once per run (docs/agents.md).
        notifications: ``{"delivery_policy": {default, priorities, sources, decide}}`` (Mastra's Agent API),
            and optionally ``digest_window_s``: how long this agent's low/medium notifications wait
            to be batched into a digest (default ``THREADLINE_DIGEST_WINDOW_S``).

    Raises:
        ConfigurationError: a processor in a list whose methods it does not implement, a bad
            tool, instructions or memory option.
    """

    def __init__(self, *, id: str, name: str | None = None, description: str | None = None,
                 instructions: object = "", model: str | Callable[..., str] | Sequence[ModelEntry] | None = None,
                 tools: list[Tool] | dict[str, Tool] | Callable[..., object] | None = None, hooks: object = None,
                 input_processors: object = None, output_processors: object = None,
                 error_processors: object = None,
                 default_options: Mapping[str, object] | Callable[..., object] | None = None,
                 max_processor_retries: int | None = None, max_retries: int | None = None,
                 metadata: Mapping[str, object] | Callable[..., object] | None = None,
                 notifications: dict[str, Any] | None = None,
                 memory: Memory | Mapping[str, object] | bool | Callable[..., object] | None = None,
                 request_context_schema: Mapping[str, object] | None = None, scorers: object = None,
                 transform: object = None, voice: object = None, editor: object = None, workflows: object = None,
                 agents: object = None) -> None:
        if not id:
            raise ConfigurationError("an agent needs an id")
        from threadline.runtime.editor import editor_policy

        self.editor = editor_policy(editor, agent_id=id)
        """What the editor may override (:class:`threadline.runtime.editor.EditorPolicy`)."""
        self.id = id
        self.name = name or id
        self.description = description
        self.metadata: Mapping[str, object] | Callable[..., object] = metadata if callable(metadata) else (metadata or {})
        self.dynamic: dict[str, Callable[..., object]] = {
            k: v for k, v in (("tools", tools), ("default_options", default_options), ("memory", memory),
                              ("metadata", metadata), ("agents", agents)) if callable(v)}
        """The options given as functions of the request context (resolved per run)."""
        self.memory = Memory() if callable(memory) else memory_config(memory, where=f"agent {id}: memory")
        self.request_context_schema = _schema_checked(request_context_schema, id)
        self.dynamic_scorers: Callable[..., object] | None = scorers if callable(scorers) else None
        self.scorers: list[ScorerEntry] = [] if callable(scorers) else scorer_entries(scorers, id)
        from threadline.runtime.transform import transform_policy

        self.transform = transform_policy(transform, where=f"agent {id}: transform")
        from threadline.runtime.voice import voice_config

        self.voice = voice_config(voice, where=f"agent {id}: voice")
        self.delivery_policy: dict[str, Any] = _delivery_policy(notifications or {})
        self._instructions = instructions
        if not callable(instructions):
            self._system = normalize_instructions(instructions)
        self.model = model
        self.tools: dict[str, Tool] = {} if callable(tools) else tool_dict(tools, id)
        if callable(workflows):
            self.dynamic["workflows"] = workflows
        self.workflow_tools = self._workflow_tools(workflows)
        """The tools of the static ``workflows`` (``workflow-<key>``), also in ``tools``."""
        from threadline.runtime.sub_agents import SubAgent, static_sub_agents

        self.agents: dict[str, SubAgent] = static_sub_agents(agents, id)
        """Sub-agents by key (a function: ``{}`` here, resolved per run); each is the tool ``agent-<key>``."""
        self.hooks = ToolHooks.of(hooks)
        self.input_processors = check_processor_list(input_processors, "input", agent_id=id)
        self.output_processors = check_processor_list(output_processors, "output", agent_id=id)
        self.error_processors = check_processor_list(error_processors, "error", agent_id=id)
        self.default_options = {} if callable(default_options) else normalize_options(default_options)
        self.max_processor_retries = max_processor_retries
        if max_retries is not None and (not isinstance(max_retries, int) or max_retries < 0):
            raise ConfigurationError(f"agent {id}: max_retries must be a non-negative integer")
        self.max_retries = max_retries
        check_fallback_list(model)

    def _workflow_tools(self, workflows: Any) -> dict[str, Tool]:
        """The tools of the static ``workflows``, added to :attr:`tools` (``{}`` for a function).

        Raises:
            ConfigurationError: a tool has a workflow tool's name, or a workflow is invalid.
        """
        from threadline.runtime.workflows import workflow_tools

        found: dict[str, Tool] = {} if callable(workflows) else workflow_tools(workflows, f"agent {self.id}")
        for name in found.keys() & self.tools.keys():
            raise ConfigurationError(f"agent {self.id}: a tool is named {name!r} like a workflow's tool")
        self.tools.update(found)
        return found

    @property
    def dynamic_instructions(self) -> bool:
        """Whether the instructions are a function of the request context (user code)."""
        return callable(self._instructions)

    def check_request_context(self, request_context: object) -> None:
        """Validate a run's request context against ``request_context_schema`` (none: anything goes).

        Raises:
            ConfigurationError: the context does not match; the message names the first failing
                path and why.
        """
        if self.request_context_schema is None:
            return
        import jsonschema

        validator = jsonschema.validators.validator_for(self.request_context_schema)(self.request_context_schema)
        error = jsonschema.exceptions.best_match(validator.iter_errors(request_context if request_context is not None
                                                                       else {}))
        if error is not None:
            where = "request_context" + "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
            raise ConfigurationError(f"agent {self.id}: {where}: {error.message}")

    def system_messages(self, request_context: Mapping[str, object] | None = None) -> list[dict[str, Any]]:
        """The agent's instructions as system messages."""
        if callable(self._instructions):
            return normalize_instructions(self._instructions(request_context or {}))
        return [dict(m) for m in self._system]

    def resolve_model(self, default: str, request_context: Mapping[str, object] | None = None) -> str:
        """The model string for a run (the first of a fallback list)."""
        return self.resolve_models(default, request_context)[0].model

    def resolve_models(self, default: str, request_context: Mapping[str, object] | None = None) -> list[ModelChoice]:
        """The fallback list for a run (one entry when ``model`` is a single model)."""
        return fallback_list(self.model, default, request_context)

    def __repr__(self) -> str:
        return f"Agent(id={self.id!r})"


def _delivery_policy(notifications: dict[str, Any]) -> dict[str, Any]:
    """The agent's notification delivery policy, with ``digest_window_s`` (seconds) when given."""
    policy = dict(notifications.get("delivery_policy") or notifications.get("deliveryPolicy") or {})
    window = notifications.get("digest_window_s", notifications.get("digestWindowS"))
    if window is not None:
        policy.setdefault("digest_window_s", float(window))
    return policy
