"""The model stream read directly from the provider (``llm._provider_chunks``) behaves as the
stream read through litellm's ``CustomStreamWrapper``: same chunks, same outcome, same error
kind for every failure shape of the fake model server; and litellm callbacks switch it off."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm
import pytest

from threadline.errors import ModelCallError
from threadline.runtime import llm
from threadline.testing import model_script as ms
from threadline.testing.model_server import start_in_thread

SCRIPTS = {
    "text": ms.text("Hello there friend"),
    "tool": ms.tool_calls(ms.tool_call("lookup", {"id": "C-1"}, id="c1")),
    "length": ms.text("a b c", finish_reason="length"),
    "usage-null": ms.text("a b", usage=None),
    "usage-on-finish": ms.text("a b", usage_on_finish=True),
    "in-band-429": ms.in_band_error(429, after=2, chunks=["Hel", "lo"]),
    "in-band-503": ms.in_band_error(503, "overloaded", after=1),
    "in-band-context": ms.in_band_error(400, ms.CONTEXT_OVERFLOW_MESSAGE, after=1),
    "disconnect": ms.mid_stream("disconnect", 3, chunks=["a", "b", "c", "d"]),
    "truncate": ms.mid_stream("truncate", 3, chunks=["a", "b", "c", "d"]),
    "malformed": ms.mid_stream("malformed", 2, chunks=["a", "b", "c"]),
    "abort-finish": ms.text("a b", finish_reason="abort"),
    "stall": ms.mid_stream("stall", 2, chunks=["a", "b", "c"], stall_seconds=3),
}


@pytest.fixture(scope="module")
def server():
    srv = start_in_thread()
    yield srv
    srv.stop()


async def _run(server, name: str, direct: bool, monkeypatch: pytest.MonkeyPatch):
    original = llm._direct
    monkeypatch.setattr(llm, "_direct", original if direct else (lambda response: False))
    model = f"threadline-direct-{name}"
    await ms.ModelScript(server.url).aqueue(SCRIPTS[name], model=model)
    outcome, chunks, error = llm.ModelOutcome(), [], None
    try:
        async for chunk in llm.stream_model(model=f"openai/{model}", messages=[{"role": "user", "content": "hi"}],
                                            tools=None, tool_choice=None, model_settings=None, provider_options=None,
                                            api_base=server.api_base, timeout_s=1.0, outcome=outcome):
            chunks.append(chunk)
    except ModelCallError as exc:
        error = (exc.kind, exc.status_code, exc.retryable)
    finally:
        monkeypatch.setattr(llm, "_direct", original)
    return chunks, (outcome.text, outcome.tool_calls, outcome.finish_reason, outcome.usage), error


@pytest.mark.parametrize("name", sorted(SCRIPTS))
async def test_direct_stream_matches_the_wrapper(server, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert await _run(server, name, True, monkeypatch) == await _run(server, name, False, monkeypatch)


def test_a_litellm_callback_turns_the_direct_path_off(monkeypatch: pytest.MonkeyPatch) -> None:
    import openai

    class Response:
        completion_stream = object.__new__(openai.AsyncStream)

    assert llm._direct(Response())
    monkeypatch.setattr(litellm, "success_callback", ["langfuse"])
    assert not llm._direct(Response())
