"""The chunks of tool approval, as Mastra's agent loop writes them (decision 225):
``tool-call-approval`` (a call waits for a person's answer) and ``tool-output-denied`` (the
person declined it). Both carry Mastra's payloads exactly; the envelope (``runId``, ``step``…)
is stamped by the sink, as for every chunk. To a subscriber they are ``OtherChunk`` bodies (a kind
read as it is), not members of ``KnownChunk``."""

from __future__ import annotations

from typing import Final

from threadline.events.chunk_types import JsonValue, OtherChunk
from threadline.events.chunks import FROM_AGENT

TOOL_CALL_APPROVAL: Final = "tool-call-approval"
"""The chunk type of a call held for approval."""
TOOL_OUTPUT_DENIED: Final = "tool-output-denied"
"""The chunk type of a declined call."""

DEFAULT_DECLINE_REASON: Final = "Tool call was not approved by the user"
"""What the model reads as a declined call's result when the person gave no reason (Mastra's
``DEFAULT_TOOL_DECLINE_REASON``)."""

APPROVAL_RESUME_SCHEMA: Final = (
    '{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"approved":'
    '{"type":"boolean","description":"Controls if the tool call is approved or not, should be true when '
    'approved and false when declined"},"reason":{"description":"Optional explanation for the decision, '
    'surfaced to the model when the tool call is declined","type":"string"}},"required":["approved"],'
    '"additionalProperties":false}')
"""The ``resumeSchema`` of a ``tool-call-approval`` chunk: the JSON Schema of the answer
``{approved, reason?}``, as a JSON string, byte for byte Mastra's."""


def decline_reason(reason: str | None) -> str:
    """The reason a declined call reports: the person's (non-blank), else :data:`DEFAULT_DECLINE_REASON`."""
    return reason if isinstance(reason, str) and reason.strip() else DEFAULT_DECLINE_REASON


def tool_call_approval_chunk(call_id: str, tool_name: str, args: JsonValue) -> OtherChunk:
    """A call of a tool that needs approval waits: ``payload {toolCallId, toolName, args,
    resumeSchema}`` (the run's step then suspends)."""
    return {"type": TOOL_CALL_APPROVAL, "from": FROM_AGENT,
            "payload": {"toolCallId": call_id, "toolName": tool_name, "args": args,
                        "resumeSchema": APPROVAL_RESUME_SCHEMA}}


def tool_output_denied_chunk(call_id: str, tool_name: str, args: JsonValue, reason: str) -> OtherChunk:
    """A declined call: ``payload {toolCallId, toolName, args, approval {id, approved: false,
    reason}}`` (the tool never ran; the model reads ``reason`` as its result)."""
    return {"type": TOOL_OUTPUT_DENIED, "from": FROM_AGENT,
            "payload": {"toolCallId": call_id, "toolName": tool_name, "args": args,
                        "approval": {"id": call_id, "approved": False, "reason": reason}}}
