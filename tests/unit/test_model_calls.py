"""Model-level retries and fallbacks (threadline.runtime.model.model_calls), against a scripted model."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from typing import Any

import pytest

from threadline.errors import ConfigurationError, ModelCallError
from threadline.runtime import Agent
from threadline.runtime.model.llm import ModelOutcome
from threadline.runtime.model.model_calls import ModelCaller, ModelChoice, RetryPolicy, fallback_list


def _model(script: dict[str, list[Any]]):
    calls: list[str] = []

    async def fn(*, model: str, outcome: ModelOutcome, **_: Any) -> AsyncIterator[dict[str, Any]]:
        calls.append(model)
        step = script[model].pop(0)
        if isinstance(step, list):
            for text in step[:-1] if isinstance(step[-1], Exception) else step:
                outcome.text += text
                yield {"type": "text-delta", "payload": {"text": text}}
            if isinstance(step[-1], Exception):
                raise step[-1]
            return
        raise step

    fn.calls = calls  # type: ignore[attr-defined]  # read by the tests
    return fn


def _err(kind: str = "rate_limit", retryable: bool = True, retry_after: float | None = None) -> ModelCallError:
    return ModelCallError(kind, kind=kind, retryable=retryable, retry_after_s=retry_after)


async def _drain(caller: ModelCaller) -> list[str]:
    return [c["payload"]["text"] async for c in caller.stream(ModelOutcome())]


async def test_transient_errors_are_retried_with_backoff_then_retry_after() -> None:
    waits: list[float] = []

    async def sleep(s: float) -> None:
        waits.append(s)

    fn = _model({"m": [_err(retry_after=7), _err("service_unavailable"), ["ok"]]})
    caller = ModelCaller(fn, [ModelChoice("m")], default_retries=2, policy=RetryPolicy(initial_s=1), sleep=sleep)
    assert await _drain(caller) == ["ok"]
    assert fn.calls == ["m", "m", "m"]
    assert 7 <= waits[0] <= 7.7 and 1.0 <= waits[1] <= 2.0  # Retry-After, then the second backoff (x2, jittered)


async def test_non_transient_errors_and_spent_retries_move_to_the_next_model_then_raise() -> None:
    async def sleep(s: float) -> None:
        pass

    fn = _model({"a": [_err("authentication", retryable=False)], "b": [_err(), _err()], "c": [["fine"]]})
    caller = ModelCaller(fn, [ModelChoice("a"), ModelChoice("b", 1), ModelChoice("c")], default_retries=5,
                         policy=RetryPolicy(), sleep=sleep)
    assert await _drain(caller) == ["fine"] and fn.calls == ["a", "b", "b", "c"] and caller.index == 2
    fn = _model({"a": [_err(), _err()]})
    with pytest.raises(ModelCallError) as info:
        await _drain(ModelCaller(fn, [ModelChoice("a")], default_retries=1, policy=RetryPolicy(), sleep=sleep))
    assert info.value.kind == "rate_limit" and not info.value.streamed and info.value.model == "a"


async def test_an_error_after_output_is_never_retried_here() -> None:
    fn = _model({"a": [["par", _err()]], "b": [["x"]]})
    caller = ModelCaller(fn, [ModelChoice("a"), ModelChoice("b")], default_retries=2, policy=RetryPolicy())
    with pytest.raises(ModelCallError) as info:
        await _drain(caller)
    assert info.value.streamed and fn.calls == ["a"] and caller.has_next()


def test_backoff_grows_is_jittered_and_capped() -> None:
    policy, rng = RetryPolicy(initial_s=2, factor=2, max_wait_s=10), random.Random(1)
    for retry, (lo, hi) in enumerate([(1, 2), (2, 4), (4, 8)]):
        assert lo <= policy.delay(retry, None, rng) <= hi
    assert policy.delay(5, None, rng) == 10 and policy.delay(0, 300, rng) == 10


def test_fallback_lists_and_bad_entries() -> None:
    assert fallback_list(None, "d") == [ModelChoice("d")]
    assert fallback_list(lambda ctx: ctx["m"], "d", {"m": "x/y"}) == [ModelChoice("x/y")]
    assert fallback_list(["a/b", {"model": "c/d", "maxRetries": 0}], "d") == [ModelChoice("a/b"), ModelChoice("c/d", 0)]
    with pytest.raises(ConfigurationError):
        Agent(id="x", model=[{"max_retries": 1}])
    with pytest.raises(ConfigurationError):
        Agent(id="x", model=[{"model": "a/b", "max_retries": -1}])
    with pytest.raises(ConfigurationError):
        Agent(id="x", model="a/b", max_retries=-2)
