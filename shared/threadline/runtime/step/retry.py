"""A processor's rejection as Mastra shows it: the rejected attempt's ``step-finish``
(``stepResult.reason: "retry"`` with the processor, its reason and metadata, or ``"tripwire"``
when no retry follows) and the feedback the retried request carries, a system message kept for
the rest of the run (docs/decisions.md#retry-feedback)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from threadline.events import chunks
from threadline.events.chunk_types import StepFinishChunk, StepResult
from threadline.runtime.messages import MessageList

FEEDBACK_TAG = "processor-retry-feedback"
"""The system-message bucket of retry feedback (Mastra's tag)."""


def feedback_text(reason: str) -> str:
    """Mastra's feedback for a rejected attempt:
    ``[Processor Feedback] Your previous response was not accepted: <reason>. Please try again
    with the feedback in mind.``"""
    return (f"[Processor Feedback] Your previous response was not accepted: {reason}. "
            "Please try again with the feedback in mind.")


def add_feedback(ml: MessageList, reason: str) -> None:
    """Add the feedback for ``reason`` as a tagged system message, once (an identical one already
    there is not repeated). Tagged system messages survive the per-step reset of the
    instructions, so the model sees it on every later request of the run; it is never stored."""
    text = feedback_text(reason)
    if not any(m.get("content") == text for m in ml.get_system_messages(FEEDBACK_TAG)):
        ml.add_system(text, FEEDBACK_TAG)


def retry_step_finish(message_id: str, retry: Mapping[str, Any] | None, output: Mapping[str, Any] | None,
                      *, retry_count: int) -> StepFinishChunk:
    """The ``step-finish`` that ends a rejected attempt, as Mastra's: ``stepResult {reason:
    "retry", isContinued: true}``, ``output {text, usage}`` of the attempt as far as it got
    (``text`` ``""`` and ``usage`` ``None`` before the model answered), with the answering
    model's ``metadata`` and usage ``raw`` once it answered, and ``processorRetryCount``
    (``retry_count``: the run's retries with this one).

    ``retry`` (an ``abort(..., retry=True)``, not ``process_api_error``'s ``{retry: True}``) adds
    ``stepResult {rawReason?, retryProcessorId, retryReason, retryMetadata}`` and
    ``processorRetryFeedback`` (:func:`feedback_text` of the reason)."""
    output = output or {}
    chunk = chunks.step_finish_chunk(message_id, reason="retry", is_continued=True,
                                     text=output.get("text", ""), usage=output.get("usage"),
                                     model=output.get("model"), response=output.get("response"),
                                     raw_reason=output.get("raw_reason") if retry else None,
                                     retry_count=retry_count)
    if retry:
        chunk["payload"]["stepResult"].update(cast(StepResult, dict(retry)))
        chunk["payload"]["processorRetryFeedback"] = feedback_text(str(retry.get("retryReason")))
    return chunk


def tripwire_step_finish(message_id: str, output: Mapping[str, Any] | None) -> StepFinishChunk:
    """The ``step-finish`` of a step whose answer ``process_output_step`` rejected for good:
    ``stepResult {reason: "tripwire", rawReason?, isContinued: false}``, the answer's ``output
    {text, usage}`` and, when ``output`` names the ``model`` that answered, the step's
    ``metadata`` (from its provider ``response``), before the run's ``tripwire`` chunk
    (decisions 2 and 123)."""
    output = output or {}
    return chunks.step_finish_chunk(message_id, reason="tripwire", is_continued=False,
                                    text=output.get("text", ""), usage=output.get("usage"),
                                    model=output.get("model"), raw_reason=output.get("raw_reason"),
                                    response=output.get("response"))
