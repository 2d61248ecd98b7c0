"""Model-level retries and fallback models (docs/models.md, "Retries and fallbacks").

One model call of a step goes through :class:`ModelCaller`: the models of the agent's fallback
list are tried in order; each is retried up to its ``max_retries`` with exponential backoff and
jitter (or the provider's ``Retry-After``) while the error is transient (``retryable``) and the
model has streamed nothing yet. A model that is exhausted hands over to the next one; when the
last one is exhausted its error goes to the error processors (:mod:`threadline.runtime.step.loop`).

Waiting happens inside the step: the worker's keep-alive keeps renewing the run's lease, and the
step holds no database connection while it waits.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from threadline.errors import ConfigurationError, ModelCallError
from threadline.logging import get_logger
from threadline.ops import tracing
from threadline.ops.metrics import MODEL_CALL_SECONDS, MODEL_ERRORS
from threadline.runtime.model.model_outcome import ModelOutcome
from threadline.runtime.step.ports import ModelFn

log = get_logger(__name__)
DEFAULT_MAX_RETRIES = 2
"""Retries of one model when neither the model entry, the call nor the agent sets any (Mastra's default)."""


@dataclass(frozen=True, slots=True)
class ModelChoice:
    """One entry of a fallback list."""

    model: str
    """litellm ``provider/model`` string."""
    max_retries: int | None = None
    """Retries of this model (``None``: the call's, else the agent's, else the default)."""
    url: str | None = None
    """An OpenAI-compatible endpoint's base URL (a model config object's ``url``; ``None``: the
    provider's own, routed by the model string)."""
    api_key: str | None = field(default=None, repr=False)
    """The key for ``url`` (``None``: none sent beyond a placeholder)."""

    def call_args(self) -> dict[str, Any]:
        """The extra arguments of the model call for this entry (``{}`` without a ``url``)."""
        return {} if self.url is None else {"api_base": self.url, "api_key": self.api_key, "direct_url": True}


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How long to wait between retries (seconds).

    The n-th retry (0-based) waits ``initial_s * factor**n`` scaled by a random factor in
    ``[0.5, 1.0]`` (jitter), capped at ``max_wait_s``; a provider's ``Retry-After`` replaces the
    backoff (plus up to 10 % jitter), also capped at ``max_wait_s``. A ``Retry-After`` beyond
    ``max_wait_s`` is not waited for at all (:meth:`refuses`, decision 196).
    """

    initial_s: float = 2.0
    factor: float = 2.0
    max_wait_s: float = 60.0

    def delay(self, retry: int, retry_after_s: float | None, rng: random.Random | None = None) -> float:
        """Seconds to wait before retry number ``retry`` (0-based)."""
        r = rng or random
        if retry_after_s is not None and retry_after_s >= 0:
            return min(retry_after_s * (1 + 0.1 * r.random()), self.max_wait_s)
        base = self.initial_s * self.factor ** retry
        return min(base * (0.5 + 0.5 * r.random()), self.max_wait_s)

    def refuses(self, retry_after_s: float | None) -> bool:
        """The provider asked for a wait longer than ``max_wait_s`` (seconds): a retry after the
        capped wait would only be refused again, so the model is exhausted at once."""
        return retry_after_s is not None and retry_after_s > self.max_wait_s


def fallback_list(model: object, default: str, request_context: Mapping[str, object] | None = None) -> list[ModelChoice]:
    """The agent's ``model`` as a fallback list.

    ``model`` is a string, a model config object (:class:`ModelConfig`: ``{"id", "url"?,
    "apiKey"?}``), a function ``(request_context) -> str | config``, ``None`` (``default``), or a
    list of those / ``{"model": str | config | function, "max_retries": int}`` (camelCase
    ``maxRetries`` accepted).

    Raises:
        ConfigurationError: an entry without a model, or a negative ``max_retries``.
    """
    ctx = request_context or {}
    out: list[ModelChoice] = []
    for item, retries in _entries(model):
        name = item(ctx) if callable(item) else item
        if isinstance(name, Mapping):  # a function returned a model config object
            name = ModelConfig.of(name)
        if isinstance(name, ModelConfig):
            out.append(ModelChoice(name.id, retries, name.url, name.api_key))
        else:
            out.append(ModelChoice(name or default, retries))
    return out or [ModelChoice(default)]


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """Mastra's model config object: ``{"id": "provider/model", "url"?, "apiKey"?}`` (or
    ``{"providerId", "modelId", ...}``); with a ``url`` the model is called as an
    OpenAI-compatible endpoint at that base URL with that key."""

    id: str
    url: str | None = None
    api_key: str | None = field(default=None, repr=False)

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> ModelConfig:
        """The config of a mapping with ``id`` (or ``providerId`` + ``modelId``), ``url`` and
        ``apiKey`` (``api_key`` accepted).

        Raises:
            ConfigurationError: no model id, or a ``url``/key that is not a string, or another key.
        """
        unknown = set(raw) - {"id", "providerId", "modelId", "url", "apiKey", "api_key"}
        if unknown:
            raise ConfigurationError(f"a model config takes id, providerId, modelId, url and apiKey; got {sorted(unknown)}")
        model_id = raw.get("id")
        if model_id is None and raw.get("modelId"):
            model_id = f"{raw['providerId']}/{raw['modelId']}" if raw.get("providerId") else raw["modelId"]
        url, key = raw.get("url"), raw.get("apiKey", raw.get("api_key"))
        if not isinstance(model_id, str) or not model_id:
            raise ConfigurationError('a model config needs "id" ("provider/model") or "modelId"')
        if not isinstance(url, str | None) or not isinstance(key, str | None):
            raise ConfigurationError("a model config's url and apiKey are strings")
        return cls(model_id, url.rstrip("/") if url else None, key)


def _is_config(item: object) -> bool:
    return isinstance(item, Mapping) and "model" not in item


def _entries(model: object) -> list[tuple[Any, int | None]]:
    """``(model or function, max_retries)`` per entry of ``model``.

    Raises:
        ConfigurationError: an entry without a model, a negative or non-integer ``max_retries``.
    """
    items = model if isinstance(model, list | tuple) else [model]
    out: list[tuple[Any, int | None]] = []
    for item in items:
        retries = None
        if _is_config(item):  # a model config object as the entry itself
            item = ModelConfig.of(item)  # type: ignore[arg-type]  # _is_config checked it is a Mapping
        elif isinstance(item, dict):
            retries = item.get("max_retries", item.get("maxRetries"))
            item = item.get("model")
            if item is None:
                raise ConfigurationError('every fallback entry needs a "model"')
            if isinstance(item, Mapping):
                item = ModelConfig.of(item)
        if retries is not None and (not isinstance(retries, int) or isinstance(retries, bool) or retries < 0):
            raise ConfigurationError(f"max_retries must be a non-negative integer, got {retries!r}")
        if item is not None and not (isinstance(item, str | ModelConfig) or callable(item)):
            raise ConfigurationError("a model is a provider/model string, a model config {id, url?, apiKey?} "
                                     f"or a function, got {type(item).__name__}")
        out.append((item, retries))
    return out


def check_fallback_list(model: object) -> None:
    """Validate an agent's ``model`` without resolving functions (see :func:`fallback_list`).

    Raises:
        ConfigurationError: as :func:`fallback_list`.
    """
    _entries(model)


class ModelLimiter(Protocol):
    """Cluster-wide provider limits (:class:`threadline.store.model_limits.PgModelLimiter`)."""

    async def acquire(self, model: str, tokens: int) -> float:
        """Wait until a call of ``model`` with about ``tokens`` prompt tokens fits its limits."""
        ...

    async def settle(self, model: str, output_tokens: int | None) -> None:
        """Charge a finished call's output tokens."""
        ...


def estimate_tokens(messages: object) -> int:
    """A rough prompt size: 4 bytes of JSON per token."""
    try:
        return len(orjson.dumps(messages, default=str)) // 4
    except TypeError:
        return 0


class ModelCaller:
    """Streams one model response with retries and fallbacks (see the module docstring).

    Args:
        model_fn: the model function (one HTTP call per invocation).
        choices: the fallback list, tried from ``start``.
        default_retries: retries of a model whose entry sets none.
        policy: the waits between retries.
        sleep: how to wait (tests may pass a recorder).
        limiter: cluster-wide limits, taken before every HTTP call (retries included).
    """

    def __init__(self, model_fn: ModelFn, choices: list[ModelChoice], *, default_retries: int,
                 policy: RetryPolicy, start: int = 0,
                 sleep: Callable[[float], Awaitable[object]] = asyncio.sleep, limiter: ModelLimiter | None = None) -> None:
        self._fn = model_fn
        self._limiter = limiter
        self.choices = choices
        self.index = min(start, len(choices) - 1)
        """The model in use (its position in ``choices``)."""
        self._default = default_retries
        self._policy = policy
        self._sleep = sleep
        self.calls = 0
        """HTTP calls made so far."""

    @property
    def model(self) -> str:
        """The model in use."""
        return self.choices[self.index].model

    def has_next(self) -> bool:
        """Another model follows the one in use."""
        return self.index + 1 < len(self.choices)

    async def _succeeded(self, choice: ModelChoice, outcome: ModelOutcome, started: float, call_span: Any) -> None:
        """A call's success: its duration observed, its usage on its span, its output tokens charged."""
        MODEL_CALL_SECONDS.labels("ok").observe(time.perf_counter() - started)
        usage = outcome.usage or {}
        if call_span is not None:
            call_span.set_attribute("gen_ai.usage.input_tokens", usage.get("inputTokens") or 0)
            call_span.set_attribute("gen_ai.usage.output_tokens", usage.get("outputTokens") or 0)
        if self._limiter is not None:
            await self._limiter.settle(choice.model, usage.get("outputTokens"))

    async def stream(self, outcome: ModelOutcome, **kwargs: Any) -> AsyncIterator[dict[str, Any]]:
        """Yield the chunks of the first call that succeeds; fill ``outcome``.

        Raises:
            ModelCallError: the error of the last model once it is exhausted, or any error after
                the model streamed output (``error.streamed`` is then true and ``error.model``
                names the model; the caller decides whether the next model takes over).
        """
        while True:
            choice = self.choices[self.index]
            retries = self._default if choice.max_retries is None else choice.max_retries
            retry = 0
            while True:
                yielded = False
                self.calls += 1
                if self._limiter is not None:
                    await self._limiter.acquire(choice.model, estimate_tokens(kwargs.get("messages")))
                started = time.perf_counter()
                call_span = tracing.start_span(f"chat {choice.model}", **{
                    "gen_ai.operation.name": "chat", "gen_ai.request.model": choice.model, "threadline.retry": retry})
                try:
                    async for chunk in self._fn(model=choice.model, outcome=outcome, **{**kwargs, **choice.call_args()}):
                        yielded = True
                        yield chunk
                    await self._succeeded(choice, outcome, started, call_span)
                    return
                except ModelCallError as exc:
                    MODEL_CALL_SECONDS.labels("error").observe(time.perf_counter() - started)
                    MODEL_ERRORS.labels(exc.kind).inc()
                    if call_span is not None:
                        call_span.set_attribute("error.type", exc.kind)
                        call_span.end()
                        call_span = None
                    exc.model = choice.model
                    if yielded:
                        exc.streamed = True
                        raise
                    if not exc.retryable or retry >= retries or self._policy.refuses(exc.retry_after_s):
                        if not self.has_next():
                            raise
                        log.warning("model exhausted; next fallback model", model=choice.model,
                                    next_model=self.choices[self.index + 1].model, kind=exc.kind,
                                    retries=retry)
                        break
                    wait = self._policy.delay(retry, exc.retry_after_s)
                    retry += 1
                    log.info("model call retried", model=choice.model, kind=exc.kind, status=exc.status_code,
                             retry=retry, max_retries=retries, wait_s=round(wait, 3),
                             retry_after_s=exc.retry_after_s)
                    outcome.reset()
                    await self._sleep(wait)
                finally:  # the span ends with the call (a stream closed early, a cancellation too)
                    if call_span is not None:
                        call_span.end()
            self.index += 1
            outcome.reset()
