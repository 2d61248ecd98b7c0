"""litellm's cost estimate for a just-opened stream is skipped for ``stream_model``'s calls when no
litellm callback is configured, and only then: other litellm calls of the process, and every
call when a callback is set, are priced as before (the callback still gets the call's cost)."""

from __future__ import annotations

import asyncio
import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from typing import Any

import litellm
import pytest
from litellm.integrations.custom_logger import CustomLogger

from threadline.runtime.model import _litellm_private, llm
from threadline.testing import model_script as ms
from threadline.testing.model_server import start_in_thread


@pytest.fixture(scope="module")
def server():
    srv = start_in_thread()
    yield srv
    srv.stop()


@pytest.fixture
def priced(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every response litellm prices (its module-level ``response_cost_calculator``)."""
    seen: list[Any] = []
    original = litellm.response_cost_calculator

    def counting(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs.get("response_object"))
        return original(*args, **kwargs)

    monkeypatch.setattr(litellm, "response_cost_calculator", counting)
    for name in _litellm_private._CALLBACK_LISTS:  # whatever litellm appends to them is dropped afterwards
        monkeypatch.setattr(litellm, name, list(getattr(litellm, name, None) or []))
    return seen


async def _stream_model(server, model: str) -> str:
    await ms.ModelScript(server.url).aqueue(ms.text("one two three"), model=model)
    outcome = llm.ModelOutcome()
    async for _ in llm.stream_model(model=f"openai/{model}", messages=[{"role": "user", "content": "hi"}], tools=None,
                                    tool_choice=None, model_settings=None, provider_options=None,
                                    api_base=server.api_base, timeout_s=5.0, outcome=outcome):
        pass
    return outcome.text


def _streams(seen: list[Any]) -> int:
    return sum(isinstance(x, litellm.CustomStreamWrapper) for x in seen)


async def test_no_callback_no_open_stream_estimate(server, priced: list[Any]) -> None:
    assert _litellm_private.OPEN_COST_BYPASS
    assert await _stream_model(server, "threadline-cost-none") == "one two three"
    assert _streams(priced) == 0


async def test_other_litellm_calls_are_still_priced(server, priced: list[Any]) -> None:
    await ms.ModelScript(server.url).aqueue(ms.text("a b"), model="threadline-cost-other")
    response = await litellm.acompletion(model="openai/threadline-cost-other", api_base=server.api_base,
                                         api_key="k", messages=[{"role": "user", "content": "hi"}], stream=True)
    async for _ in response:
        pass
    assert _streams(priced) == 1


async def test_with_a_callback_nothing_is_skipped(server, priced: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    logged: list[dict[str, Any]] = []

    class Recorder(CustomLogger):
        async def async_log_success_event(self, kwargs, response_obj, start_time, end_time):
            logged.append(kwargs)

    monkeypatch.setattr(litellm, "callbacks", [Recorder()])
    assert await _stream_model(server, "threadline-cost-callback") == "one two three"
    assert _streams(priced) == 1
    for _ in range(100):  # litellm logs success in the background
        if logged:
            break
        await asyncio.sleep(0.05)
    assert logged and "response_cost" in logged[0]
