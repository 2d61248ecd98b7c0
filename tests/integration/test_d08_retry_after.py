"""D08: ``Retry-After`` in every legal form (and some illegal ones), through the real model call
path (litellm / the direct HTTP path, classify, ModelCaller) against the fake model server. The
measured wait is the gap between the FM's two request times (its clock); the policy is the
case's: first backoff 2 s, waits capped at 10 s, 2 retries (decisions 195, 196)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from threadline.errors import ModelCallError
from threadline.runtime.model import llm, retry_after
from threadline.runtime.model.model_calls import ModelCaller, ModelChoice, RetryPolicy
from threadline.testing import model_script as ms
from threadline.testing.model_server import RunningServer, start_in_thread

pytestmark = pytest.mark.integration

POLICY = RetryPolicy(initial_s=2, max_wait_s=10)


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    srv = start_in_thread()
    yield srv
    srv.stop()


def _limited(headers: dict[str, str]) -> ms.Script:
    return ms.error(429, "Rate limit reached.", type="rate_limit_error", code="rate_limit_exceeded", headers=headers)


async def _run(server: RunningServer, models: list[str]) -> tuple[str, list[str]]:
    """Stream one call over the fallback list ``models``; (text, the models the caller called)."""
    called: list[str] = []

    async def fn(**kwargs: object):  # the real model function, recording each HTTP call
        called.append(str(kwargs["model"]))
        async for chunk in llm.stream_model(**kwargs):  # type: ignore[arg-type]  # ModelCaller's keywords
            yield chunk

    choices = [ModelChoice(f"openai/{m}", None, server.api_base, "sk-d08") for m in models]
    caller = ModelCaller(fn, choices, default_retries=2, policy=POLICY)
    outcome = llm.ModelOutcome()
    text = ""
    async for chunk in caller.stream(outcome, messages=[{"role": "user", "content": "hi"}], tools=None,
                                     tool_choice=None, model_settings=None, provider_options=None,
                                     api_base=None, timeout_s=5.0):
        if chunk["type"] == "text-delta":
            text += chunk["payload"]["text"]
    assert outcome.finish_reason == "stop"
    return text, called


async def _wait(server: RunningServer, headers: dict[str, str]) -> float:
    """Seconds between FM[1] (a 429 with ``headers``) and FM[2] ("ok")."""
    model = f"threadline-d08-{uuid.uuid4().hex[:8]}"
    await ms.ModelScript(server.url).aqueue([_limited(headers), ms.text("ok")], model=model)
    text, called = await _run(server, [model])
    assert text == "ok" and len(called) == 2  # one retry, streamed under the same call
    seen = await ms.ModelScript(server.url).arequests(model)
    assert len(seen) == 2
    return seen[1]["time"] - seen[0]["time"]


@pytest.mark.parametrize(("variant", "headers", "low", "high"), [
    ("a", {"retry-after": "3"}, 3.0, 3.4),
    ("b", {"retry-after": "@date+4"}, 3.5, 4.5),  # the FM renders FM-now + 4 s; its Date is FM-now
    ("c", {"retry-after-ms": "500"}, 0.5, 0.6),
    ("d", {"retry-after": "soon", "retry-after-ms": "700"}, 0.7, 0.8),
    ("e", {"retry-after": "-3"}, 1.0, 2.0),
    ("e'", {"retry-after": "nan"}, 1.0, 2.0),
    ("e''", {"retry-after": "2"}, 2.0, 2.2),  # h11 sends no spaces around a value; the unit test reads " 2 "
    ("f", {"retry-after": "@date-30"}, 0.0, 0.5),
])
async def test_d08_the_wait_follows_retry_after(server: RunningServer, variant: str, headers: dict[str, str],
                                                low: float, high: float) -> None:
    wait = await _wait(server, headers)
    assert low <= wait <= high, f"({variant}) waited {wait:.3f} s"


async def test_d08_h_an_http_date_is_read_on_the_providers_clock(server: RunningServer,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """(h): the worker's clock 30 s ahead of the FM's; the date is measured against ``Date``."""
    monkeypatch.setattr(retry_after, "time", SimpleNamespace(time=lambda: time.time() + 30))
    wait = await _wait(server, {"retry-after": "@date+4"})
    assert 3.5 <= wait <= 4.5


async def test_d08_g_a_wait_beyond_the_cap_goes_to_the_fallback_at_once(server: RunningServer) -> None:
    a, b = f"threadline-a-{uuid.uuid4().hex[:6]}", f"threadline-b-{uuid.uuid4().hex[:6]}"
    script = ms.ModelScript(server.url)
    await script.aqueue([_limited({"retry-after": "120"})], model=a)
    await script.aqueue([ms.text("ok")], model=b)
    text, called = await _run(server, [a, b])
    assert text == "ok" and called == [f"openai/{a}", f"openai/{b}"]
    first, second = (await script.arequests(a)), (await script.arequests(b))
    assert len(first) == 1 and len(second) == 1  # no second request to threadline-a
    assert second[0]["time"] - first[0]["time"] <= 1.0


async def test_d08_g2_without_fallback_the_call_fails_at_once(server: RunningServer) -> None:
    a = f"threadline-a-{uuid.uuid4().hex[:6]}"
    script = ms.ModelScript(server.url)
    await script.aqueue([_limited({"retry-after": "120"}), ms.text("never")], model=a)
    started = time.monotonic()
    with pytest.raises(ModelCallError) as caught:
        await _run(server, [a])
    assert time.monotonic() - started <= 1.0
    assert caught.value.kind == "rate_limit" and caught.value.retry_after_s == 120
    assert len(await script.arequests(a)) == 1  # no retries spent on 10 s waits
    await script.aclear(a)
