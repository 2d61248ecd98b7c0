"""Processor lists (docs/processors.md): an agent's ``input``/``output``/``error`` processors checked
when the agent is built, and resolved into per-run copies when a run starts."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from threadline.errors import ConfigurationError
from threadline.runtime.processor import LIST_METHODS, ProcessorLike, implements


def check_processor_list(processors: Any, kind: str, *, agent_id: str) -> list[ProcessorLike] | Callable[..., object]:
    """Validate a processor list at agent build time (functions are checked at run time).

    Raises:
        ConfigurationError: a processor without an id, or with none of the methods of its list.
    """
    if processors is None:
        return []
    if callable(processors) and not isinstance(processors, list):
        return processors
    for p in processors:
        _check_one(p, kind, agent_id)
    return list(processors)


def _check_one(p: object, kind: str, agent_id: str) -> None:
    from threadline.runtime.workflows import Workflow

    if isinstance(p, Workflow):  # Mastra's ProcessorWorkflow: docs/decisions.md#processor-workflows
        raise ConfigurationError(
            f"agent {agent_id}: {kind}_processors holds the workflow {p.id!r}; a processor list holds processors "
            "only (a workflow of processor steps is not supported: write one Processor that calls the steps "
            "in order, or list the processors themselves; workflows run as the model's tools)")
    pid = getattr(p, "id", None)
    if not pid or not isinstance(pid, str):
        raise ConfigurationError(f"agent {agent_id}: processor {type(p).__name__} has no id")
    methods = LIST_METHODS[kind]
    if not any(implements(p, m) for m in methods):
        raise ConfigurationError(
            f"agent {agent_id}: processor {pid!r} is in {kind}_processors but implements none of "
            f"{', '.join(methods)}")


def resolve_list(processors: Any, kind: str, request_context: Mapping[str, object], agent_id: str,
                 catalogue: Mapping[str, object] | None = None) -> list[ProcessorLike]:
    """Resolve a list (or a function of ``request_context``) into per-run copies with
    ``processor_index`` set (docs/decisions.md §8: never on a shared instance).

    A call-level list travels in a JSON request, so it names processors by id; ids are looked
    up in ``catalogue`` (the agents module's ``processors`` and the agent's own).

    Raises:
        ConfigurationError: an unknown processor id, or a processor in the wrong list.
    """
    items = processors(request_context) if callable(processors) else list(processors or [])
    out: list[ProcessorLike] = []
    for i, p in enumerate(items):
        if isinstance(p, str):
            found = (catalogue or {}).get(p)
            if found is None:
                raise ConfigurationError(f"agent {agent_id}: no processor with id {p!r} for {kind}_processors")
            p = found
        _check_one(p, kind, agent_id)
        c = copy.copy(p)
        c.processor_index = i
        out.append(c)
    return out
