"""Editor overrides (Mastra's Editor overrides): stored edits of a code-defined agent's
``instructions`` and its tools' ``description``, applied at the agent's next run. The agent's
``editor`` option says which fields may be edited:

* omitted (``None``) or ``True``: instructions and tool descriptions;
* ``False``: nothing (the agent is locked);
* ``{"instructions": bool, "tools": bool | {"description": bool}}``: a key left out stays
  editable, ``False`` locks that field (``"tools": False`` or ``{"description": False}``
  locks the tool descriptions).

``id``, ``name`` and ``model`` always come from code: no override names them. Adding or
removing tools (Mastra's ``tools: true`` also edits tool membership) is not supported: only
the descriptions of the tools the code defines. Pure functions; the store and the worker do the I/O
(decisions 68, 69).

An override is ``{"instructions"?: str, "tools"?: {tool_id: {"description": str}}}``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TypedDict

from threadline.errors import ConfigurationError
from threadline.events.json_types import JSONObject
from threadline.runtime.tools import Tool

MAX_INSTRUCTIONS_CHARS = 100_000
MAX_DESCRIPTION_CHARS = 10_000


class ToolEdit(TypedDict):
    """An override of one tool."""

    description: str


class EditorOverrides(TypedDict, total=False):
    """An agent's editor overrides, as stored with a run (``RunState.editor``)."""

    instructions: str
    tools: dict[str, ToolEdit]
    """By tool id."""


@dataclass(frozen=True, slots=True)
class EditorPolicy:
    """Which fields of an agent the editor may override."""

    instructions: bool = True
    tool_descriptions: bool = True

    @property
    def locked(self) -> bool:
        """Nothing may be edited."""
        return not (self.instructions or self.tool_descriptions)

    def to_json(self) -> JSONObject:
        """Mastra's shape: ``{"instructions": bool, "tools": {"description": bool}}``."""
        return {"instructions": self.instructions, "tools": {"description": self.tool_descriptions}}


def editor_policy(editor: object, *, agent_id: str = "?") -> EditorPolicy:
    """The :class:`EditorPolicy` of an agent's ``editor`` option (or of its stored JSON).

    Raises:
        ConfigurationError: not ``None``, a bool, or ``{instructions?: bool, tools?: bool |
            {description?: bool}}``.
    """
    if editor is None or editor is True:
        return EditorPolicy()
    if editor is False:
        return EditorPolicy(False, False)
    if not isinstance(editor, Mapping) or set(editor) - {"instructions", "tools"}:
        raise ConfigurationError(f"agent {agent_id}: editor must be False or {{instructions?: bool, "
                                 "tools?: bool | {description?: bool}}")
    instructions = editor.get("instructions", True)
    tools = editor.get("tools", True)
    if isinstance(tools, Mapping):
        if set(tools) - {"description"}:
            raise ConfigurationError(f"agent {agent_id}: editor.tools takes only description")
        tools = tools.get("description", True)
    if not isinstance(instructions, bool) or not isinstance(tools, bool):
        raise ConfigurationError(f"agent {agent_id}: editor fields must be booleans")
    return EditorPolicy(instructions, tools)


def strip(policy: EditorPolicy, overrides: Mapping[str, object] | None,
          tool_ids: Iterable[str] | None = None) -> tuple[EditorOverrides, list[str]]:
    """``overrides`` without what ``policy`` locks, what is not a string, and tools the code does
    not define (``tool_ids``; ``None``: the tools are a function of the request context, any id
    is kept). Returns ``(kept, stripped)``: ``stripped`` names each field left out
    (``instructions``, ``tools.<id>.description``, ``<key>`` for an unknown key such as ``model``).

    Raises:
        ValueError: a string longer than the limits (instructions 100 000, a description 10 000 characters).
    """
    kept: EditorOverrides = {}
    stripped: list[str] = []
    for key, value in (overrides or {}).items():
        if key == "instructions":
            if not policy.instructions or not isinstance(value, str):
                stripped.append("instructions")
                continue
            if len(value) > MAX_INSTRUCTIONS_CHARS:
                raise ValueError(f"instructions longer than {MAX_INSTRUCTIONS_CHARS} characters")
            kept["instructions"] = value
        elif key == "tools" and isinstance(value, Mapping):
            known = None if tool_ids is None else set(tool_ids)
            tools: dict[str, ToolEdit] = {}
            for tool_id, edit in value.items():
                description = edit.get("description") if isinstance(edit, Mapping) else None
                if not policy.tool_descriptions or not isinstance(description, str) or \
                        (known is not None and tool_id not in known):
                    stripped.append(f"tools.{tool_id}.description")
                    continue
                if len(description) > MAX_DESCRIPTION_CHARS:
                    raise ValueError(f"tool {tool_id}: description longer than {MAX_DESCRIPTION_CHARS} characters")
                tools[str(tool_id)] = {"description": description}
            if tools:
                kept["tools"] = tools
        else:
            stripped.append(str(key))  # id, name, model and anything else: code's, never overridden
    return kept, stripped


def tool_descriptions(overrides: EditorOverrides | None) -> dict[str, str]:
    """``{tool_id: description}`` of an override (already stripped)."""
    tools = (overrides or {}).get("tools") or {}
    return {tid: edit["description"] for tid, edit in tools.items()
            if isinstance(edit, Mapping) and isinstance(edit.get("description"), str)}


def with_descriptions(tools: Mapping[str, Tool], descriptions: Mapping[str, str] | None) -> dict[str, Tool]:
    """``tools`` with the overridden descriptions (copies; the agent's own tools are unchanged)."""
    if not descriptions:
        return dict(tools)
    return {tid: replace(t, description=descriptions[tid]) if tid in descriptions else t for tid, t in tools.items()}
