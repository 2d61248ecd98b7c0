"""The name a sub-agent's tool goes by, and what the model reads of its result (decision 76;
decision 127 for the result). Apart from :mod:`threadline.runtime.sub_agents` so that the
message list, which renders tool results for the model, needs nothing of the agent."""

from __future__ import annotations

from collections.abc import Mapping

TOOL_PREFIX = "agent-"
"""A sub-agent under key ``k`` is the tool ``agent-k`` (Mastra's naming)."""


def model_output(tool_name: str, result: object) -> object:
    """What the model reads of a tool's result: a sub-agent call's ``text`` alone (as Mastra's
    sub-agent tools hand the model only the answer; the run and thread ids stay in the stream and
    the stored thread), any other result as it is."""
    if tool_name.startswith(TOOL_PREFIX) and isinstance(result, Mapping) and "subAgentRunId" in result:
        return str(result.get("text") or "")
    return result
