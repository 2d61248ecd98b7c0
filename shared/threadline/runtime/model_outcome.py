"""What one model call produced, as a plain record: importable without litellm, so that the
services which never call a model (ingress, orchestrator, scheduler) start without paying
litellm's import (several seconds of CPU)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class ModelOutcome:
    """What one model call produced (filled while streaming)."""

    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str = "other"
    usage: dict[str, Any] | None = None
    raw_finish_reason: str | None = None
    reasoning: str = ""

    def reset(self) -> None:
        """Forget a failed call's partial output (before a retry or the next fallback model)."""
        self.text, self.reasoning, self.tool_calls, self.finish_reason = "", "", [], "other"
        self.usage = self.raw_finish_reason = None
