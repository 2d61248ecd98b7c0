"""providerOptions → litellm's names (threadline.runtime.model.provider_options), and their way from a
signal to the prompt."""

from __future__ import annotations

import pytest

from threadline.events.signals import signal_to_message
from threadline.runtime.messages import to_core
from threadline.runtime.model.provider_options import prepare_messages, request_options

CACHE = {"anthropic": {"cacheControl": {"type": "ephemeral"}}}


@pytest.mark.parametrize(("model", "options", "expected"), [
    ("openai/gpt-5", {"openai": {"reasoningEffort": "low", "textVerbosity": "high", "serviceTier": "flex"}},
     {"reasoning_effort": "low", "verbosity": "high", "service_tier": "flex"}),
    ("anthropic/claude-sonnet-4-6", {"anthropic": {"thinking": {"type": "enabled", "budgetTokens": 1000},
                                                   "disableParallelToolUse": True, "sendReasoning": True}},
     {"thinking": {"type": "enabled", "budget_tokens": 1000}, "parallel_tool_calls": False}),
    ("google/gemini-2.5-pro", {"google": {"thinkingConfig": {"thinkingBudget": 512, "includeThoughts": True},
                                          "safetySettings": [{"category": "x"}]}},
     {"thinking": {"type": "enabled", "budget_tokens": 512}, "safety_settings": [{"category": "x"}]}),
    ("gemini/gemini-2.5-pro", {"google": {"cachedContent": "c/1"}}, {"cached_content": "c/1"}),
    ("openai/gpt-5", {"anthropic": {"thinking": {"type": "enabled"}}}, {}),  # another provider's entry
    ("openai/gpt-5", {"openai": {"someNewOption": 3}}, {"some_new_option": 3}),
    ("openai/gpt-5", None, {}),
    ("openai/gpt-5", {"openai": "not a mapping"}, {}),
])
def test_call_and_step_options_get_litellms_names(model, options, expected) -> None:
    assert request_options(options, model) == expected


def test_anthropic_cache_control_goes_on_the_last_block_and_the_key_never_leaves() -> None:
    prompt = [{"role": "system", "content": "policy", "providerOptions": CACHE},
              {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
               "providerOptions": CACHE},
              {"role": "user", "content": "plain"}]
    sent = prepare_messages(prompt, "anthropic/claude-sonnet-4-6")
    assert sent[0]["content"] == [{"type": "text", "text": "policy", "cache_control": {"type": "ephemeral"}}]
    assert sent[1]["content"][0] == {"type": "text", "text": "a"}
    assert sent[1]["content"][1]["cache_control"] == {"type": "ephemeral"}
    assert sent[2] is prompt[2] and "providerOptions" in prompt[0]  # the input is not modified
    assert prepare_messages(prompt, "openai/gpt-5")[0] == {"role": "system", "content": "policy"}


def test_a_signals_provider_options_reach_its_prompt_message() -> None:
    signal = {"id": "s1", "type": "notification", "tagName": "ci", "contents": "build red",
              "createdAt": "2026-01-01T00:00:00Z", "attributes": {}, "metadata": {}, "providerOptions": CACHE}
    core = to_core([signal_to_message(signal, thread_id="t", resource_id="r")])
    assert core[0]["providerOptions"] == CACHE and core[0]["content"] == "<ci>build red</ci>"
