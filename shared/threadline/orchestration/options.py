"""Run options as requests name them: Mastra's camelCase names mapped to Python names."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from threadline.events.options import OPTION_ALIASES

_OPTION_ALIASES = OPTION_ALIASES


def normalize_options(options: Mapping[str, object] | None) -> dict[str, Any]:
    """Execution options with Mastra's camelCase names (``maxSteps``) mapped to Python names
    (``max_steps``); other keys are kept as they are."""
    return {_OPTION_ALIASES.get(k, k): v for k, v in (options or {}).items()}
