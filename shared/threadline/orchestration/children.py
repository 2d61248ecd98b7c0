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
tool_name, depth}`` (set by the orchestrator): where its chunks are mirrored as nested chunks,
and how deep in its tree the child runs (``depth``: 1 for a root's child)."""


def depth_of(options: Mapping[str, object]) -> int:
    """How deep in its sub-agent tree a run is: 0 for a run no sub-agent call started, its
    parent's depth + 1 for a child run (1 for a child stored before depths were recorded)."""
    target = nested_target(options)
    if target is None:
        return 0
    depth = target.get("depth")
    return depth if isinstance(depth, int) and not isinstance(depth, bool) and depth > 0 else 1


def depth_limit_error(max_depth: int) -> str:
    """The tool error of a sub-agent call made by a run already ``max_depth`` deep: no child run
    is created for it (decision 219)."""
    return f"sub-agent depth limit {max_depth} reached"


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
