"""The public contract: JSON Schemas of every event, written to ``docs/schemas/``."""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter

from threadline.events import (
    Aborted,
    AbortRequest,
    Accepted,
    Chunk,
    DeadLetter,
    ErrorReply,
    Generate,
    LifecycleEvent,
    Notified,
    Persisted,
    QueueMessage,
    RunResult,
    SendMessage,
    SendNotificationSignal,
    SendSignal,
    SendStateSignal,
    Skipped,
    Stream,
    ToolApprovalRequest,
    ToolCallResolved,
)
from threadline.events.ingress import IngressRequest
from threadline.events.replies import Reply

PUBLIC: dict[str, Any] = {
    "ingress-request": IngressRequest, "send_message": SendMessage, "queue_message": QueueMessage,
    "send_signal": SendSignal, "send_state_signal": SendStateSignal,
    "send_notification_signal": SendNotificationSignal, "notified": Notified, "stream": Stream, "generate": Generate,
    "abort": AbortRequest, "reply": Reply, "accepted": Accepted, "persisted": Persisted, "skipped": Skipped,
    "aborted": Aborted, "result": RunResult, "error": ErrorReply, "chunk": Chunk, "lifecycle": LifecycleEvent,
    "dead-letter": DeadLetter, "tool_approval": ToolApprovalRequest, "resolved": ToolCallResolved,
}


def schemas() -> dict[str, dict[str, Any]]:
    """``{name: JSON Schema}`` of every public event (validation mode: what a producer may send)."""
    return {name: TypeAdapter(model).json_schema(mode="validation") for name, model in PUBLIC.items()}
