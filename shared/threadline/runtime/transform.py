"""Tool payload transforms (Mastra's tool ``transform``, ``ToolPayloadTransformPolicy``;
decision 72): what a tool's input, output or error looks like on the stream (target ``display``)
and in the stored, user-visible transcript (target ``transcript``). The model is never shown a
transformed payload: the run's message list (what the next step sends the model) keeps the raw
ones.

Two levels, the tool's first:

* per tool, ``Tool(..., transform={"display": {"input": f, "output": f, "error": f,
  "input_delta": f}, "transcript": {...}})``: each function ``(ctx) -> payload``;
* per agent, ``Agent(..., transform={"transform_tool_payload": f, "targets": ["display"]})``
  (camelCase accepted; ``targets`` default both): ``f(ctx) -> payload`` for every tool of the agent
  without its own rule for that target.

``ctx`` is a :class:`TransformContext` (``target``, ``phase``: ``input-available``,
``input-delta``, ``output-available`` or ``error``; ``tool_name``, ``tool_call_id``, ``input``,
``output``, ``error``, ``input_text_delta``). Fail closed: a function that returns ``None`` or
raises gives ``{"message": "Tool <phase> payload unavailable"}``. Streamed input deltas are
suppressed for a tool a display rule covers unless it has an ``input_delta`` function.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from threadline._internal.usercode import call_user
from threadline.errors import ConfigurationError
from threadline.logging import get_logger

log = get_logger(__name__)

TARGETS = ("display", "transcript")
PHASE_KEYS = {"input-available": "input", "input-delta": "input_delta", "output-available": "output", "error": "error"}
"""Phase -> the key of a per-tool rule (camelCase ``inputDelta`` accepted)."""
SUPPRESS = object()
"""A delta chunk dropped from the stream."""


ToolTransform = dict[str, dict[str, Callable[..., object]]]
"""A tool's ``transform``: ``{target: {phase key: function}}`` (``display``/``transcript``;
``input``, ``output``, ``error``, ``input_delta``)."""


@dataclass(frozen=True, slots=True)
class TransformContext:
    """What a transform function is given."""

    target: str
    phase: str
    tool_name: str
    tool_call_id: str
    input: object = None
    output: object = None
    error: object = None
    input_text_delta: str | None = None

    def __getitem__(self, key: str) -> object:  # ctx["input"] as well as ctx.input
        return getattr(self, key)


@dataclass(frozen=True, slots=True)
class TransformPolicy:
    """The agent's policy: ``fn`` for ``targets``."""

    fn: Callable[..., object]
    targets: frozenset[str]


def _targets(targets: Any, where: str) -> frozenset[str]:
    found = frozenset(TARGETS if targets is None else targets)
    if not found <= set(TARGETS):
        raise ConfigurationError(f"{where}: targets must be among {list(TARGETS)}, got {sorted(found)}")
    return found


def transform_policy(policy: object, *, where: str) -> TransformPolicy | None:
    """An agent's ``transform`` option as a :class:`TransformPolicy` (``None``: none).

    Raises:
        ConfigurationError: not ``{transform_tool_payload: function, targets?}``.
    """
    if policy is None:
        return None
    if isinstance(policy, TransformPolicy):
        return policy
    if not isinstance(policy, Mapping):
        raise ConfigurationError(f"{where}: must be {{'transform_tool_payload': f, 'targets': [...]}}")
    fn = policy.get("transform_tool_payload", policy.get("transformToolPayload"))
    if not callable(fn):
        raise ConfigurationError(f"{where}: transform_tool_payload must be a function of the payload context")
    return TransformPolicy(fn, _targets(policy.get("targets"), where))


def check_tool_transform(rule: object, tool_id: str) -> ToolTransform | None:
    """A tool's ``transform`` as ``{target: {phase key: function}}``.

    Raises:
        ConfigurationError: an unknown target or phase key, or a value that is not a function.
    """
    if rule is None:
        return None
    where = f"tool {tool_id}: transform"
    if not isinstance(rule, Mapping):
        raise ConfigurationError(f"{where}: must be {{'display' | 'transcript': {{'input' | 'output' | ...: f}}}}")
    out: ToolTransform = {}
    for target, funcs in rule.items():
        _targets([target], where)
        if not isinstance(funcs, Mapping):
            raise ConfigurationError(f"{where}.{target}: must map input/output/error/input_delta to functions")
        out[target] = {}
        for key, fn in funcs.items():
            key = "input_delta" if key == "inputDelta" else key
            if key not in PHASE_KEYS.values() or not callable(fn):
                raise ConfigurationError(f"{where}.{target}.{key}: not a phase key with a function")
            out[target][key] = fn
    return out


def covers(target: str, tool_rule: Mapping[str, object] | None, policy: TransformPolicy | None) -> bool:
    """Whether any rule transforms ``target`` payloads of this tool."""
    return bool(tool_rule and target in tool_rule) or bool(policy and target in policy.targets)


async def transformed(ctx: TransformContext, tool_rule: Mapping[str, Any] | None,
                      policy: TransformPolicy | None, raw: object) -> object:
    """The payload ``ctx.target`` shows for ``ctx.phase`` (``raw`` when no rule covers it;
    :data:`SUPPRESS` for an input delta a rule covers without an ``input_delta`` function)."""
    fn: Callable[..., object] | None = None
    if tool_rule and ctx.target in tool_rule:
        fn = tool_rule[ctx.target].get(PHASE_KEYS[ctx.phase])
        if fn is None:
            return SUPPRESS if ctx.phase == "input-delta" else raw
    elif policy and ctx.target in policy.targets:
        fn = policy.fn
    else:
        return raw
    try:
        value = await call_user(fn, ctx)
    except Exception:
        log.warning("tool payload transform raised; payload withheld", tool=ctx.tool_name, phase=ctx.phase,
                    target=ctx.target, exc_info=True)
        value = None
    if value is None:
        if ctx.phase == "input-delta":
            return SUPPRESS
        return {"message": f"Tool {ctx.phase} payload unavailable"}
    return value


_CHUNK_FIELDS = {"tool-call": (("args", "input-available"),),
                 "tool-call-delta": (("argsTextDelta", "input-delta"),),
                 "tool-result": (("args", "input-available"), ("result", "output-available")),
                 "tool-error": (("args", "input-available"), ("error", "error"))}
"""Chunk type -> the payload fields a display transform rewrites, with their phase."""


async def display_chunk(chunk: Mapping[str, Any], tools: Mapping[str, object],
                        policy: TransformPolicy | None) -> object:
    """``chunk`` as the stream shows it: tool payload fields transformed (a copy), the chunk
    itself when nothing applies, or :data:`SUPPRESS` (a covered input delta)."""
    if chunk.get("type") in _STEP_ENDS:
        return await _display_step_end(chunk, tools, policy)
    fields = _CHUNK_FIELDS.get(str(chunk.get("type")))
    if not fields:
        return chunk
    payload = chunk.get("payload") or {}
    name = str(payload.get("toolName") or "")
    rule = getattr(tools.get(name), "transform", None)
    if not covers("display", rule, policy):
        return chunk
    new_payload = dict(payload)
    for key, phase in fields:
        ctx = TransformContext(target="display", phase=phase, tool_name=name,
                               tool_call_id=str(payload.get("toolCallId") or ""), input=payload.get("args"),
                               output=payload.get("result"), error=payload.get("error"),
                               input_text_delta=payload.get("argsTextDelta"))
        value = await transformed(ctx, rule, policy, payload.get(key))
        if value is SUPPRESS:
            return SUPPRESS
        new_payload[key] = value
    return {**chunk, "payload": new_payload}


_STEP_ENDS = frozenset({"step-finish", "finish"})
"""Chunks that repeat the step's tool calls (``payload.output.toolCalls``, as Mastra's do)."""


async def _display_step_end(chunk: Mapping[str, Any], tools: Mapping[str, object],
                            policy: TransformPolicy | None) -> Mapping[str, Any]:
    """A ``step-finish`` / ``finish`` whose ``output.toolCalls`` are shown as their ``tool-call``
    chunks are (a covered call's ``args`` transformed), so the step's end repeats nothing the
    stream hid; the chunk itself when it lists no call."""
    payload = chunk.get("payload") or {}
    output = payload.get("output") or {}
    calls = output.get("toolCalls")
    if not calls:
        return chunk
    shown = [await display_chunk({"type": "tool-call", "payload": call}, tools, policy) for call in calls]
    shown_calls = [c["payload"] for c in shown if isinstance(c, Mapping)]
    return {**chunk, "payload": {**payload, "output": {**output, "toolCalls": shown_calls}}}


async def transcript_entries(entries: Sequence[tuple[Mapping[str, Any], str]], tools: Mapping[str, object],
                             policy: TransformPolicy | None) -> list[tuple[Mapping[str, object], str]]:
    """The message list's entries as stored (the user-visible transcript): ``args``, ``result``
    and ``errorText`` of tool invocations transformed in copies; the list itself is untouched."""
    out: list[tuple[Mapping[str, object], str]] = []
    for msg, source in entries:
        parts = (msg.get("content") or {}).get("parts") if isinstance(msg.get("content"), Mapping) else None
        invocations = [p for p in parts or () if p.get("type") == "tool-invocation"]
        if not any(covers("transcript", getattr(tools.get(p["toolInvocation"].get("toolName")), "transform", None),
                          policy) for p in invocations):
            out.append((msg, source))
            continue
        new = copy.deepcopy(dict(msg))
        for part in new["content"]["parts"]:
            if part.get("type") != "tool-invocation":
                continue
            inv = part["toolInvocation"]
            name = str(inv.get("toolName") or "")
            rule = getattr(tools.get(name), "transform", None)
            if not covers("transcript", rule, policy):
                continue
            base = {"target": "transcript", "tool_name": name, "tool_call_id": str(inv.get("toolCallId") or ""),
                    "input": inv.get("args"), "output": inv.get("result"), "error": inv.get("errorText")}
            inv["args"] = await transformed(TransformContext(phase="input-available", **base), rule, policy,
                                            inv.get("args"))
            if "result" in inv:
                inv["result"] = await transformed(TransformContext(phase="output-available", **base), rule, policy,
                                                  inv["result"])
            if "errorText" in inv:
                inv["errorText"] = await transformed(TransformContext(phase="error", **base), rule, policy,
                                                     inv["errorText"])
        out.append((new, source))
    return out
