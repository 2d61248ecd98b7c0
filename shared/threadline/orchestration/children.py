"""A sub-agent's child run, as the orchestrator and the worker see it (decisions 76-79): the call
recorded with its suspended step (:class:`ChildRequest`), the child run's option naming its parent
(:data:`PARENT_OPTION`), where a child's chunks are mirrored (:func:`nested_target`), and what the
parent's tool gets when the child ends (:func:`child_outcome`). Pure values; the writes are in
:mod:`threadline.store.sub_agents`, the Agent option in :mod:`threadline.runtime.sub_agents`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ChildRequest:
    """A sub-agent call recorded with its (suspended) step: the orchestrator starts the child run."""

    tool_call_id: str
    tool_name: str
    agent_id: str
    child_run_id: str
    child_thread_id: str
    prompt: str


PARENT_OPTION = "sub_agent_of"
"""The child run's option naming its parent ``{run_id, resource_id, thread_id, tool_call_id,
tool_name}`` (set by the orchestrator): where its chunks are mirrored as nested chunks."""


def nested_target(options: Mapping[str, object]) -> Mapping[str, Any] | None:
    """The parent a child run's chunks are mirrored to (``None``: not a child run)."""
    target = options.get(PARENT_OPTION)
    return target if isinstance(target, Mapping) and target.get("thread_id") else None


def child_outcome(status: str, text: str | None, error: object) -> tuple[Any, str | None]:
    """``(result, error)`` stored as the parent's tool result when a child run ends: its final
    text when it finished; a tool error naming the status (and the child's error) otherwise."""
    if status == "finished":
        return {"text": text or ""}, None
    detail = ""
    if isinstance(error, Mapping) and error.get("message"):
        detail = f": {error['message']}"
    return None, f"sub-agent run {status}{detail}"
