"""Run options as requests name them: Mastra's camelCase names mapped to Python names."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_OPTION_ALIASES = {"maxSteps": "max_steps", "maxProcessorRetries": "max_processor_retries",
                   "toolChoice": "tool_choice", "modelSettings": "model_settings",
                   "providerOptions": "provider_options", "activeTools": "active_tools",
                   "requestContext": "request_context", "maxRetries": "max_retries",
                   "structuredOutput": "structured_output", "memoryOptions": "memory_options",
                   "prepareStep": "prepare_step", "inputProcessors": "input_processors",
                   "outputProcessors": "output_processors", "errorProcessors": "error_processors"}


def normalize_options(options: Mapping[str, object] | None) -> dict[str, Any]:
    """Execution options with Mastra's camelCase names (``maxSteps``) mapped to Python names
    (``max_steps``); other keys are kept as they are."""
    return {_OPTION_ALIASES.get(k, k): v for k, v in (options or {}).items()}
