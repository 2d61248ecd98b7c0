"""What one model call produced, as a plain record: importable without litellm, so that the
services which never call a model (ingress, orchestrator, scheduler) start without paying
litellm's import (several seconds of CPU)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from threadline.events.chunk_types import ToolCallPayload, Usage

__all__ = ["USAGE_KEYS", "ModelOutcome", "Usage", "UsageKey"]

UsageKey = Literal["inputTokens", "outputTokens", "totalTokens", "cachedInputTokens", "reasoningTokens"]
USAGE_KEYS: tuple[UsageKey, ...] = ("inputTokens", "outputTokens", "totalTokens", "cachedInputTokens",
                                    "reasoningTokens")
"""The summed keys of :class:`Usage`, in order."""


@dataclass(slots=True)
class ModelOutcome:
    """What one model call produced (filled while streaming).

    ``text`` and ``reasoning`` are kept as the streamed pieces and joined when read: appending to
    a ``str`` held in an attribute copies the whole string each time (CPython extends a string in
    place only for a local variable), so a 200,000-chunk stream spent half of the worker's CPU
    per chunk copying its text so far (bench/results/HISTORY.md, "The streamed text, copied per chunk").
    """

    tool_calls: list[ToolCallPayload] = field(default_factory=list)
    finish_reason: str = "other"
    usage: Usage | None = None
    raw_finish_reason: str | None = None
    response_id: str | None = None
    """The provider's id of the response (``chatcmpl-…``), as its first chunk gave it."""
    created_s: int | None = None
    """When the provider says it made the response (``created``, seconds since the epoch)."""
    model_id: str | None = None
    """The model the provider says answered (``model`` of its chunks)."""
    headers: dict[str, str] | None = None
    """The provider's HTTP response headers (``None``: the read path does not expose them)."""
    raw_usage: dict[str, Any] | None = None
    """The provider's last usage report as it sent it (JSON), behind :attr:`usage`."""
    request_body: dict[str, Any] | None = None
    """The JSON body sent to the provider (``None``: sent through litellm's own client, which
    does not show it)."""
    _text: list[str] = field(default_factory=list)
    _reasoning: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        """The text streamed so far."""
        return _joined(self._text)

    @text.setter
    def text(self, value: str) -> None:
        self._text = [value] if value else []

    @property
    def reasoning(self) -> str:
        """The reasoning streamed so far."""
        return _joined(self._reasoning)

    @reasoning.setter
    def reasoning(self, value: str) -> None:
        self._reasoning = [value] if value else []

    def add_text(self, piece: str) -> None:
        """Append a streamed piece of text (O(1); joined on the next read of ``text``)."""
        self._text.append(piece)

    def add_reasoning(self, piece: str) -> None:
        """Append a streamed piece of reasoning."""
        self._reasoning.append(piece)

    def reset(self) -> None:
        """Forget a failed call's partial output (before a retry or the next fallback model)."""
        self._text, self._reasoning, self.tool_calls, self.finish_reason = [], [], [], "other"
        self.usage = self.raw_finish_reason = None
        self.response_id = self.created_s = self.model_id = self.headers = self.raw_usage = None
        self.request_body = None


def _joined(pieces: list[str]) -> str:
    """The pieces as one string, kept as the list's only piece (a second read does not join again)."""
    if len(pieces) > 1:
        pieces[:] = ["".join(pieces)]
    return pieces[0] if pieces else ""
