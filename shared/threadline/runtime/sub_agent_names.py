"""The name a sub-agent's tool goes by, and what the model reads of its result (decision 76;
decision 127 for the result). Apart from :mod:`threadline.runtime.sub_agents` so that the
message list, which renders tool results for the model, needs nothing of the agent."""

from __future__ import annotations

from collections.abc import Mapping

from threadline.events.json_types import JSONObject

TOOL_PREFIX = "agent-"
"""A sub-agent under key ``k`` is the tool ``agent-k`` (Mastra's naming)."""


def sub_agent_model_output(result: object) -> JSONObject | None:
    """Mastra's ``toModelOutput`` of a sub-agent tool: ``{type: "text", value}``, ``value`` the
    result itself when it is a string, else its ``text`` (``""`` when it has none) — also for a
    result a ``before_tool_call`` hook gave instead of running the sub-agent. ``None`` for no result."""
    if result is None:
        return None
    if isinstance(result, str):
        return {"type": "text", "value": result}
    text = result.get("text") if isinstance(result, Mapping) else None
    return {"type": "text", "value": "" if text is None else str(text)}


def model_output(tool_name: str, result: object, provider_metadata: object = None) -> object:
    """What the model reads of a tool's result: the text of ``provider_metadata.mastra.modelOutput``
    when the call's part carries one (a sub-agent call's, :func:`sub_agent_model_output`), a
    sub-agent call's ``text`` alone (results stored before the part carried it), any other result
    as it is. As Mastra's sub-agent tools hand the model only the answer; the run and thread ids
    stay in the stream and the stored thread."""
    mastra = provider_metadata.get("mastra") if isinstance(provider_metadata, Mapping) else None
    output = mastra.get("modelOutput") if isinstance(mastra, Mapping) else None
    if isinstance(output, Mapping) and output.get("type") == "text":
        return str(output.get("value") or "")
    if tool_name.startswith(TOOL_PREFIX) and isinstance(result, Mapping) and "subAgentRunId" in result:
        return str(result.get("text") or "")
    return result
