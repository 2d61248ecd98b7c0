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
    "hideSignals": "hide_signals", "requireToolApproval": "require_tool_approval",
}
"""Mastra's camelCase option name → the Python name."""

CALLER_OPTIONS: frozenset[str] = frozenset({"hide_signals"})
"""Options that shape only the caller's own stream, never the run (Mastra's caller-local
``hideSignals``): the client takes them out of the request (:func:`split_caller_options`)."""

EXECUTION_OPTIONS: frozenset[str] = frozenset({*OPTION_ALIASES.values(), "instructions", "hooks"})
"""Every option a ``stream``/``generate`` call takes, by its Python name (:data:`CALLER_OPTIONS` too)."""


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


HideSignals = bool | list[str]
"""``hide_signals``: ``True`` hides every signal echo chunk, a list the echoes of those signal types."""


def split_caller_options(options: Mapping[str, object] | None) -> tuple[dict[str, object], HideSignals]:
    """``(the run's options, hide_signals)``: ``hideSignals`` / ``hide_signals`` taken out of
    ``options`` (``False`` when not given), as Mastra applies it only to the call's own stream.

    Raises:
        ValueError: ``hide_signals`` neither a bool nor a list of signal type names.
    """
    run = {k: v for k, v in (options or {}).items() if OPTION_ALIASES.get(k, k) not in CALLER_OPTIONS}
    hide = next((v for k, v in (options or {}).items() if OPTION_ALIASES.get(k, k) == "hide_signals"), False)
    if hide is None:
        hide = False
    if not isinstance(hide, bool) and not (isinstance(hide, list) and all(isinstance(t, str) for t in hide)):
        raise ValueError(f"hideSignals must be a boolean or a list of signal types, not {hide!r}")
    return run, hide
