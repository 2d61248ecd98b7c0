"""An agent's model given as Mastra's model config object (``{"id", "url", "apiKey"}``): the call
goes to that OpenAI-compatible base URL with that key, whatever the provider prefix; a plain
model string is routed as before; a malformed config is refused when the agent is built."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pytest

from threadline.errors import ConfigurationError
from threadline.runtime.agent import Agent
from threadline.runtime.model import llm
from threadline.runtime.model.model_calls import ModelCaller, ModelChoice, RetryPolicy
from threadline.testing import model_script as ms
from threadline.testing.model_server import start_in_thread

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def server():
    srv = start_in_thread()
    yield srv
    srv.stop()


async def test_a_model_config_object_calls_its_url_with_its_key(server) -> None:
    agent = Agent(id="cfg", name="cfg", model={"id": "acme/my-model", "url": server.api_base + "/", "apiKey": "sk-acme"})
    choices = agent.resolve_models("openai/threadline-default")
    assert choices == [ModelChoice("acme/my-model", None, server.api_base, "sk-acme")]
    assert "sk-acme" not in repr(choices)  # the key stays out of logs
    script = ms.ModelScript(server.url)
    await script.aqueue(ms.text("From acme."), model="my-model")
    caller = ModelCaller(llm.stream_model, choices, default_retries=0, policy=RetryPolicy())
    outcome = llm.ModelOutcome()
    async for _ in caller.stream(outcome, messages=[{"role": "user", "content": "hi"}], tools=None, tool_choice=None,
                                 model_settings=None, provider_options=None, api_base=None, timeout_s=5.0):
        pass
    assert outcome.text == "From acme."
    sent = (await script.arequests("my-model"))[-1]
    assert sent["body"]["model"] == "my-model"
    assert llm.call_kwargs("acme/my-model", api_base="http://h/v1", timeout_s=5.0, api_key="k", direct_url=True)[
        "api_key"] == "k"
    assert llm.call_kwargs("my-model", api_base="http://h/v1", timeout_s=5.0, direct_url=True)["api_key"] == llm.NO_KEY


def test_model_config_shapes() -> None:
    by_ids = Agent(id="a", name="a", model={"providerId": "acme", "modelId": "m", "url": "http://h/v1"})
    assert by_ids.resolve_models("d")[0] == ModelChoice("acme/m", None, "http://h/v1", None)
    listed = Agent(id="b", name="b", model=[{"model": {"id": "acme/m", "url": "http://h/v1"}, "max_retries": 1},
                                            "openai/gpt-4o"])
    assert listed.resolve_models("d") == [ModelChoice("acme/m", 1, "http://h/v1"), ModelChoice("openai/gpt-4o")]
    assert ModelChoice("openai/gpt-4o").call_args() == {}
    assert Agent(id="c", name="c", model=lambda ctx: {"id": "acme/x", "url": "http://h"}).resolve_models("d")[0].url \
        == "http://h"
    with pytest.raises(ConfigurationError, match="needs"):
        Agent(id="e", name="e", model={"url": "http://h/v1"})
    with pytest.raises(ConfigurationError, match="takes id"):
        Agent(id="f", name="f", model={"id": "a/b", "baseURL": "http://h/v1"})
