"""The model-string table (threadline.runtime.model.providers): Mastra's provider ids and key variables
→ litellm's model names and keys; a missing key is an authentication error naming the variable."""

from __future__ import annotations

import litellm
import pytest

from threadline.errors import ModelCallError
from threadline.runtime.model.llm import call_kwargs
from threadline.runtime.model.providers import PROVIDERS, Route, route

SEED_MODELS = [  # common providers' model strings and the variables each names
    ("openai/gpt-5.6-sol", "OPENAI_API_KEY", "openai/gpt-5.6-sol"),
    ("anthropic/claude-sonnet-4-6", "ANTHROPIC_API_KEY", "anthropic/claude-sonnet-4-6"),
    ("google/gemini-2.5-pro", "GOOGLE_API_KEY", "gemini/gemini-2.5-pro"),
    ("google/gemini-2.5-pro", "GOOGLE_GENERATIVE_AI_API_KEY", "gemini/gemini-2.5-pro"),
]


@pytest.mark.parametrize(("model", "var", "litellm_model"), SEED_MODELS)
def test_seed_model_strings_route_with_the_seed_variables(model: str, var: str, litellm_model: str) -> None:
    assert route(model, {var: "k-1"}) == Route(litellm_model, "k-1", model.split("/")[0])
    _, provider, _, _ = litellm.get_llm_provider(litellm_model)  # litellm knows the name it is given
    assert provider == litellm_model.split("/")[0]


@pytest.mark.parametrize("prefix", sorted(PROVIDERS))
def test_every_provider_of_the_table_is_one_litellm_knows(prefix: str) -> None:
    target = PROVIDERS[prefix]
    routed = route(f"{prefix}/some-model", {target.env[0]: "k"})
    assert litellm.get_llm_provider(routed.model)[1] == target.litellm


def test_a_missing_key_is_an_authentication_error_naming_the_variables() -> None:
    with pytest.raises(ModelCallError) as info:
        route("google/gemini-2.5-pro", {})
    assert info.value.kind == "authentication" and not info.value.retryable
    assert "GOOGLE_GENERATIVE_AI_API_KEY or GOOGLE_API_KEY" in str(info.value)
    with pytest.raises(ModelCallError, match="set ANTHROPIC_API_KEY"):
        route("anthropic/claude-sonnet-4-6", {"OPENAI_API_KEY": "k"})


def test_unknown_prefixes_and_local_models_pass_through() -> None:
    assert route("bedrock/anthropic.claude-v2", {}) == Route("bedrock/anthropic.claude-v2", None, None)
    local = call_kwargs("google/threadline-x", api_base="http://127.0.0.1:1/v1", timeout_s=5)
    assert local["model"] == "gemini/threadline-x" and local["api_key"] == "threadline-local"
