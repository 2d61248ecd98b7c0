"""The execution options a ``stream``/``generate`` request may carry (Mastra's ``AgentExecutionOptions``
that Threadline runs), under their Python names and Mastra's camelCase ones.

An option outside this list is refused when the request is built (docs/decisions.md#unknown-options):
Mastra ignores a name it does not know, so a misspelt ``maxStep`` would run with the default
silently; here it fails at once, naming the option and the known ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

OPTION_ALIASES: dict[str, str] = {
    "maxSteps": "max_steps", "maxProcessorRetries": "max_processor_retries", "toolChoice": "tool_choice",
    "modelSettings": "model_settings", "providerOptions": "provider_options", "activeTools": "active_tools",
    "requestContext": "request_context", "maxRetries": "max_retries", "structuredOutput": "structured_output",
    "memoryOptions": "memory_options", "prepareStep": "prepare_step", "inputProcessors": "input_processors",
    "outputProcessors": "output_processors", "errorProcessors": "error_processors",
}
"""Mastra's camelCase option name → the Python name."""

EXECUTION_OPTIONS: frozenset[str] = frozenset({*OPTION_ALIASES.values(), "instructions", "hooks"})
"""Every option a run takes, by its Python name."""


def unknown_options(options: Mapping[str, object] | None) -> list[str]:
    """The names in ``options`` that are no execution option (under either spelling), sorted."""
    return sorted(k for k in (options or {}) if OPTION_ALIASES.get(k, k) not in EXECUTION_OPTIONS)


def check_options(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` itself when every name is an execution option.

    Raises:
        ValueError: ``unknown execution option(s) 'x'; known: ...`` naming each unknown one.
    """
    unknown = unknown_options(options)
    if unknown:
        known = ", ".join(sorted({*OPTION_ALIASES, *(EXECUTION_OPTIONS - set(OPTION_ALIASES.values()))}))
        raise ValueError(f"unknown execution option(s) {', '.join(map(repr, unknown))}; known: {known} "
                         "(or their snake_case names)")
    return options
