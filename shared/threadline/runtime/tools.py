"""Tools with pydantic input schemas, and the tool hooks (Mastra's Agent API, "Tool hook").

A tool's ``execute(input, context)`` may be sync or async (a sync one runs in a worker thread, so
that blocking code never freezes the worker's other runs); ``input`` is an instance of the tool's
``input_schema`` (validated from the model's arguments), ``context`` a :class:`ToolContext`.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from threadline._internal.usercode import call_user
from threadline.errors import ConfigurationError, ToolTimeoutError
from threadline.events.json_types import JSONObject
from threadline.runtime.json_form import json_form
from threadline.runtime.message_types import ToolSpec

if TYPE_CHECKING:
    from threadline.runtime.workflow_journal import JournalFactory


_T = TypeVar("_T")


class Unset(enum.Enum):
    """A tool's ``timeout_s`` not given: the run's default applies (``None`` means none)."""

    DEFAULT = "default"


DEFAULT = Unset.DEFAULT
"""``timeout_s=DEFAULT``: the run's default tool timeout (``THREADLINE_TOOL_TIMEOUT_S``)."""


class AbortSignal(threading.Event):
    """Set when the run is aborted (or its step is stopped) while the tool runs: Mastra's
    ``abortSignal``. A sync tool polls ``aborted`` (or ``wait(timeout)``) to stop early; an async
    tool is cancelled anyway. Once set it stays set."""

    @property
    def aborted(self) -> bool:
        """True once the run was aborted."""
        return self.is_set()


class CustomWriter(Protocol):
    """``context.writer``: streams a custom ``data-*`` chunk of a tool or processor."""

    async def custom(self, chunk: Mapping[str, object], options: Mapping[str, object] | None = None) -> None:
        """Emit ``chunk`` (``{"type": "data-…", "data": …, "transient"?: bool}``)."""
        ...


@dataclass(slots=True)
class ToolContext:
    """What a running tool gets besides its input.

    Attributes:
        tool_call_id: the model's id for this call.
        run_id, thread_id, resource_id, agent_id, step: where the call happens.
        idempotency_key: stable across re-executions of the same call (``run_id:tool_call_id``);
            pass it to external systems that deduplicate.
        writer: ``await context.writer.custom({"type": "data-…", "data": …, "transient"?: bool})``
            streams a custom data chunk.
        request_context: the request's context dict.
        abort_signal: an :class:`AbortSignal` (a ``threading.Event``) set when the run is aborted
            while the tool runs: a plain ``def`` tool keeps running in its thread after an abort
            (its result is dropped), unless it polls ``context.abort_signal.aborted`` and returns.
        journal: ``tool_call_id -> Journal`` where a workflow tool records its steps
            (:mod:`threadline.runtime.workflows`); ``None`` where nothing is recorded.
        default_timeout_s: the run's default tool timeout (seconds; ``None``: none), the
            deadline of each step of a workflow that sets none of its own.
    """

    tool_call_id: str
    run_id: str
    thread_id: str
    resource_id: str
    agent_id: str
    step: int
    idempotency_key: str
    writer: CustomWriter
    request_context: dict[str, object] = field(default_factory=dict)
    abort_signal: AbortSignal = field(default_factory=AbortSignal)
    journal: JournalFactory | None = None
    default_timeout_s: float | None = None


@dataclass
class Tool:
    """A tool the model can call (Mastra's ``createTool``).

    Attributes:
        id: the name the model sees.
        description: what the tool does, for the model.
        input_schema: a pydantic model class (or a JSON Schema dict) for the arguments.
        execute: ``(input, context) -> result``; the result is brought to JSON by one rule
            (:mod:`threadline.runtime.json_form`: pydantic models dumped, ``Decimal`` as a string,
            …); a result with no JSON form ends the call as a ``tool-error`` naming its type and path.
        transform: ``{"display" | "transcript": {"input" | "output" | "error" | "input_delta": f}}``:
            how this tool's payloads look on the stream and in the stored transcript
            (:mod:`threadline.runtime.transform`); the model gets them raw.
        require_approval: Mastra's ``requireApproval``: every call waits for a person's approve
            or decline before it runs (the run's step suspends, :mod:`threadline.runtime.step.approvals`).
        timeout_s: seconds one call may run before it ends as a ``ToolTimeoutError`` tool error
            (the tool is told through ``context.abort_signal``; a plain ``def`` keeps its thread
            until it returns, its late result dropped); ``DEFAULT``: the run's default
            (``THREADLINE_TOOL_TIMEOUT_S``); ``None``: no deadline (decision 218).
    """

    id: str
    description: str
    execute: Callable[..., object]
    input_schema: type[BaseModel] | JSONObject | None = None
    transform: Mapping[str, object] | None = None
    require_approval: bool = False
    timeout_s: float | Unset | None = DEFAULT

    def __post_init__(self) -> None:
        if not self.id or not all(c.isalnum() or c in "_-" for c in self.id):
            raise ConfigurationError(f"tool id {self.id!r} must match [a-zA-Z0-9_-]+")
        check_timeout(self.timeout_s, f"tool {self.id}")
        self._takes_context = len(inspect.signature(self.execute).parameters) >= 2
        from threadline.runtime.transform import check_tool_transform

        self.transform = check_tool_transform(self.transform, self.id)

    def parameters(self) -> JSONObject:
        """JSON Schema of the arguments, as Mastra sends a zod schema (draft-07 ``$schema``,
        ``additionalProperties: false`` on closed objects, ``required`` always, no ``title``s);
        a JSON Schema dict is sent as written."""
        if isinstance(self.input_schema, dict):
            return self.input_schema
        if self.input_schema is None:
            schema: dict[str, Any] = {"type": "object", "properties": {}}
        else:
            schema = self.input_schema.model_json_schema()
        return model_schema(schema)

    def spec(self) -> ToolSpec:
        """OpenAI-style function spec (what litellm sends to the provider)."""
        return {"type": "function", "function": {"name": self.id, "description": self.description,
                                                 "parameters": self.parameters()}}

    def parse(self, args: object) -> object:
        """Validate the model's arguments. Raises ``ValueError`` with the reason."""
        if isinstance(self.input_schema, type) and issubclass(self.input_schema, BaseModel):
            try:
                return self.input_schema.model_validate(args or {})
            except ValidationError as exc:
                raise ValueError(f"invalid arguments for tool {self.id}: {exc.errors()[:3]}") from exc
        return args

    async def run(self, args: object, context: ToolContext) -> Any:
        """Validate ``args``, execute, and return a JSON-ready result."""
        parsed = self.parse(args)
        out = await (call_user(self.execute, parsed, context) if self._takes_context
                     else call_user(self.execute, parsed))
        return to_jsonable(out)


JSON_SCHEMA_DRAFT_07 = "http://json-schema.org/draft-07/schema#"


def model_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A pydantic JSON Schema in the shape Mastra sends a zod object's: ``$schema`` (draft-07)
    at the root, pydantic's ``title`` keywords dropped, every object schema with ``required``
    (``[]`` when nothing is) and ``additionalProperties: false`` unless it says otherwise.
    Returns a new dict; ``schema`` is not modified."""
    out = _zod_like(schema)
    return {"$schema": JSON_SCHEMA_DRAFT_07, **out}


def _zod_like(node: object) -> Any:
    if isinstance(node, list):
        return [_zod_like(v) for v in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title" and isinstance(value, str):
            continue  # pydantic's generated titles; a property named "title" lives under "properties"
        if key in ("properties", "$defs", "definitions", "patternProperties") and isinstance(value, dict):
            out[key] = {name: _zod_like(sub) for name, sub in value.items()}
        else:
            out[key] = _zod_like(value)
    if out.get("type") == "object" and isinstance(out.get("properties"), dict):
        out.setdefault("required", [])
        out.setdefault("additionalProperties", False)
    return out


def to_jsonable(value: object) -> Any:
    """``value`` as plain JSON values by the one rule of :func:`threadline.runtime.json_form.json_form`
    (Mastra's ``ensureSerializable``): pydantic models dumped, ``Decimal`` as a string, a set as a
    sorted list, … Raises :class:`~threadline.errors.NotSerialisableError` for a value with no JSON
    form (the call then ends as a ``tool-error`` naming its type and path)."""
    return json_form(value)


def create_tool(*, id: str, description: str, execute: Callable[..., object],
                input_schema: type[BaseModel] | JSONObject | None = None,
                transform: Mapping[str, object] | None = None, require_approval: bool = False,
                timeout_s: float | Unset | None = DEFAULT) -> Tool:
    """Mastra's ``createTool`` (``require_approval``: Mastra's ``requireApproval``; ``timeout_s``:
    Threadline's, see :class:`Tool`)."""
    return Tool(id=id, description=description, execute=execute, input_schema=input_schema, transform=transform,
                require_approval=require_approval, timeout_s=timeout_s)


def check_timeout(timeout_s: object, where: str) -> None:
    """Raises :class:`ConfigurationError` unless ``timeout_s`` is ``DEFAULT``, ``None`` or a
    positive number of seconds."""
    if timeout_s is DEFAULT or timeout_s is None:
        return
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or not timeout_s > 0:
        raise ConfigurationError(f"{where}: timeout_s must be a positive number of seconds or None, "
                                 f"got {timeout_s!r}")


def deadline_s(timeout_s: float | Unset | None, default_s: float | None) -> float | None:
    """The deadline a call runs under: its own ``timeout_s``, else ``default_s``."""
    return default_s if isinstance(timeout_s, Unset) else timeout_s


async def bounded(call: Awaitable[_T], timeout_s: float | None, what: str, abort: AbortSignal | None) -> _T:
    """Await ``call`` for at most ``timeout_s`` seconds (``None``: no bound).

    Raises:
        ToolTimeoutError: the deadline passed (``call`` is cancelled, ``abort`` set so a plain
            ``def`` polling it stops); a ``TimeoutError`` the call raised itself propagates as it is.
    """
    if timeout_s is None:
        return await call
    try:
        async with asyncio.timeout(timeout_s) as scope:
            return await call
    except TimeoutError:
        if not scope.expired():
            raise
        if abort is not None:
            abort.set()
        raise ToolTimeoutError(what=what, timeout_s=timeout_s) from None


def tool(id: str | None = None, *, description: str | None = None, input_schema: type[BaseModel] | None = None,
         transform: Mapping[str, object] | None = None,
         require_approval: bool = False,
         timeout_s: float | Unset | None = DEFAULT) -> Callable[[Callable[..., object]], Tool]:
    """Decorator form: ``@tool(description=..., input_schema=Model)`` over ``execute``."""

    def wrap(fn: Callable[..., object]) -> Tool:
        return Tool(id=id or fn.__name__, description=description or (fn.__doc__ or "").strip(),
                    execute=fn, input_schema=input_schema, transform=transform,
                    require_approval=require_approval, timeout_s=timeout_s)

    return wrap


HookFn = Callable[[Any], Any | Awaitable[Any]]


@dataclass
class ToolHooks:
    """``hooks.beforeToolCall`` / ``hooks.afterToolCall`` (Mastra's Agent API).

    ``before_tool_call(ctx)`` gets ``ctx.tool_name``, ``ctx.input``, ``ctx.context``,
    ``ctx.metadata`` (``agent_id``, ``agent_name``, Mastra's ``agentId`` / ``agentName``, and
    ``agent_metadata``: the agent's metadata for the run); returning ``{"proceed": False,
    "output": x}`` skips the tool and uses ``x`` as its result (``after_tool_call`` is then not
    called, as in Mastra). ``after_tool_call(ctx)`` also gets ``ctx.output`` and ``ctx.error``
    (set when the tool raised; then ``output`` is ``None``). A sub-agent call (the tool
    ``agent-<key>``) is wrapped too: ``before_tool_call`` runs before its child run starts
    (``proceed: False`` starts none), ``after_tool_call`` once the child ended, with its result.
    """

    before_tool_call: HookFn | None = None
    after_tool_call: HookFn | None = None

    @classmethod
    def of(cls, hooks: object) -> ToolHooks:
        """Accept a ``ToolHooks``, a dict (snake or camel keys) or ``None``."""
        if hooks is None:
            return cls()
        if isinstance(hooks, ToolHooks):
            return hooks
        if isinstance(hooks, dict):
            return cls(before_tool_call=hooks.get("before_tool_call") or hooks.get("beforeToolCall"),
                       after_tool_call=hooks.get("after_tool_call") or hooks.get("afterToolCall"))
        raise ConfigurationError("hooks must be a ToolHooks or a dict")

    def merged(self, override: ToolHooks) -> ToolHooks:
        """Call-level hooks replace the matching agent-level hook."""
        return ToolHooks(before_tool_call=override.before_tool_call or self.before_tool_call,
                         after_tool_call=override.after_tool_call or self.after_tool_call)
