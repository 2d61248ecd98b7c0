"""Versioned pydantic models for every event on the wire.

Families, one module each: ``ingress`` (requests users publish), ``replies`` (answers to them),
``commands`` (run commands, step tasks and step results between the internal services),
``lifecycle`` (run and thread lifecycle), ``chunks`` (the per-thread stream; its bodies typed one
kind each in ``chunk_types``) and ``dead_letters``.
``codec`` turns them into Kafka records (key, headers, JSON value) and back.
"""

from threadline.events.base import SCHEMA_VERSION, SCHEMA_VERSIONS, Event
from threadline.events.chunk_types import ChunkBody, ChunkKind, parse_chunk
from threadline.events.chunks import Chunk
from threadline.events.commands import (
    AbortRun,
    InternalEvent,
    ResolveToolCall,
    RunCommand,
    StartRun,
    StepResult,
    StepTask,
)
from threadline.events.dead_letters import DeadLetter
from threadline.events.ingress import (
    AbortRequest,
    Generate,
    IfActive,
    IfIdle,
    IngressRequest,
    MessageObject,
    NotificationInput,
    QueueMessage,
    SendMessage,
    SendNotificationSignal,
    SendSignal,
    SendStateSignal,
    SignalInput,
    StateInput,
    Stream,
    ToolApprovalRequest,
)
from threadline.events.lifecycle import LifecycleEvent
from threadline.events.replies import (
    Aborted,
    Accepted,
    ErrorReply,
    Notified,
    Persisted,
    Reply,
    RunResult,
    Skipped,
    ToolCallResolved,
)

__all__ = [
    "SCHEMA_VERSION",
    "SCHEMA_VERSIONS",
    "AbortRequest",
    "AbortRun",
    "Aborted",
    "Accepted",
    "Chunk",
    "ChunkBody",
    "ChunkKind",
    "DeadLetter",
    "ErrorReply",
    "Event",
    "Generate",
    "IfActive",
    "IfIdle",
    "IngressRequest",
    "InternalEvent",
    "LifecycleEvent",
    "MessageObject",
    "NotificationInput",
    "Notified",
    "Persisted",
    "QueueMessage",
    "Reply",
    "ResolveToolCall",
    "RunCommand",
    "RunResult",
    "SendMessage",
    "SendNotificationSignal",
    "SendSignal",
    "SendStateSignal",
    "SignalInput",
    "Skipped",
    "StartRun",
    "StateInput",
    "StepResult",
    "StepTask",
    "Stream",
    "ToolApprovalRequest",
    "ToolCallResolved",
    "parse_chunk",
]
