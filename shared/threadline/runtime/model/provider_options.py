"""Mastra's ``providerOptions`` → litellm's names (docs/models.md, "Provider options").

``providerOptions`` are keyed by provider (``{"openai": {...}, "anthropic": {...}}``); only the
entry of the called model's provider is used (``google`` and ``gemini`` both name Gemini).

* Call and step options (:func:`request_options`) become litellm arguments: the names of
  :data:`CALL_NAMES` are renamed (``reasoningEffort`` → ``reasoning_effort``), Anthropic's and
  Google's thinking settings become litellm's ``thinking``, any other key is passed on in
  snake_case.
* Message options (:func:`prepare_messages`: instructions, messages, signals) are Anthropic's
  ``cacheControl``, put on the message's last content block as ``cache_control``, which litellm
  sends as Anthropic's block-level cache control. Other message options are not sent.
* An assistant turn's signed thinking blocks (``thinking_blocks``, from a reasoning part with
  Anthropic's signature) go back to Anthropic's models only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from threadline.logging import get_logger

log = get_logger(__name__)

CALL_NAMES: dict[str, dict[str, str]] = {
    "openai": {"reasoningEffort": "reasoning_effort", "maxCompletionTokens": "max_completion_tokens",
               "parallelToolCalls": "parallel_tool_calls", "serviceTier": "service_tier",
               "textVerbosity": "verbosity", "logitBias": "logit_bias", "promptCacheKey": "prompt_cache_key",
               "safetyIdentifier": "safety_identifier", "user": "user", "store": "store", "metadata": "metadata"},
    "anthropic": {"reasoningEffort": "reasoning_effort", "effort": "reasoning_effort"},
    "google": {"safetySettings": "safety_settings", "cachedContent": "cached_content",
               "responseModalities": "modalities"},
}
"""Per provider: Mastra's (AI SDK's) option name → litellm's argument."""
_ALIASES = {"gemini": "google"}
_DROPPED = {"sendReasoning", "structuredOutputs", "cacheControl", "cache_control"}


def provider_key(model: str) -> str:
    """The ``providerOptions`` key of ``model`` (``google/gemini-2.5-pro`` → ``google``)."""
    prefix = model.split("/", 1)[0] if "/" in model else "openai"
    return _ALIASES.get(prefix, prefix)


def _options_for(options: Mapping[str, object] | None, model: str) -> dict[str, Any]:
    if not isinstance(options, Mapping):
        return {}
    key = provider_key(model)
    picked = options.get(key)
    if picked is None:
        picked = next((v for k, v in options.items() if _ALIASES.get(k) == key), None)
    return dict(picked) if isinstance(picked, Mapping) else {}


def _snake(name: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in name)


def request_options(options: Mapping[str, object] | None, model: str) -> dict[str, Any]:
    """litellm arguments for the call/step ``providerOptions`` of ``model``.

    Returns ``{}`` when nothing applies; never raises (a malformed entry is skipped and logged).
    """
    picked = _options_for(options, model)
    key = provider_key(model)
    names = CALL_NAMES.get(key, {})
    out: dict[str, Any] = {}
    for name, value in picked.items():
        if value is None or name in _DROPPED:
            continue
        if name == "thinking" and isinstance(value, Mapping):  # Anthropic: {type, budgetTokens}
            thinking = {"type": value.get("type", "enabled")}
            budget = value.get("budgetTokens", value.get("budget_tokens"))
            if budget is not None:
                thinking["budget_tokens"] = budget
            out["thinking"] = thinking
        elif name == "thinkingConfig" and isinstance(value, Mapping):  # Google: {thinkingBudget, includeThoughts}
            budget = value.get("thinkingBudget", value.get("thinking_budget"))
            if budget is not None:
                out["thinking"] = {"type": "enabled", "budget_tokens": budget}
            elif value.get("thinkingLevel"):
                out["reasoning_effort"] = value["thinkingLevel"]
        elif name == "disableParallelToolUse":
            out["parallel_tool_calls"] = not value
        else:
            out[names.get(name, _snake(name))] = value
    return out


def _cache_control(options: Mapping[str, object] | None, model: str) -> dict[str, Any] | None:
    if provider_key(model) != "anthropic":
        return None
    picked = _options_for(options, model)
    control = picked.get("cacheControl", picked.get("cache_control"))
    return dict(control) if isinstance(control, Mapping) else None


def _takes_thinking_blocks(model: str) -> bool:
    """Whether ``model`` is Anthropic's (directly, or Claude behind another route): the
    signed thinking blocks of earlier turns go back to it."""
    return provider_key(model) == "anthropic" or "claude" in model.lower()


def prepare_messages(messages: Sequence[Mapping[str, Any]], model: str) -> list[Mapping[str, Any]]:
    """The prompt without ``providerOptions`` keys, their message-level options applied for
    ``model`` (Anthropic ``cacheControl`` → ``cache_control`` on the last content block), and
    assistant turns' signed ``thinking_blocks`` kept only for Anthropic's models.
    The input list and its messages are not modified."""
    out = []
    signed = _takes_thinking_blocks(model)
    for message in messages:
        if "thinking_blocks" in message and not signed:  # another provider would refuse the key
            message = {k: v for k, v in message.items() if k != "thinking_blocks"}
        if "providerOptions" not in message:
            out.append(message)
            continue
        msg = {k: v for k, v in message.items() if k != "providerOptions"}
        control = _cache_control(message.get("providerOptions"), model)
        content = msg.get("content")
        if control is not None and content:
            blocks: list[dict[str, Any]] = ([{"type": "text", "text": content}] if isinstance(content, str)
                                            else [dict(b) for b in content])
            if blocks and isinstance(blocks[-1], dict):
                blocks[-1]["cache_control"] = control
                msg["content"] = blocks
        out.append(msg)
    return out
