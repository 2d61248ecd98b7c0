"""The one adapter around litellm (K5): streams Mastra chunks, assembles tool calls by index,
decides the step's finish reason from what was streamed, takes usage from wherever it arrives,
and maps every litellm exception to a small set of error kinds before processors see it. The
rules a stream is read by are :mod:`threadline.runtime.model.llm_normalise`'s.

Every call is ``litellm.acompletion`` (routing, auth, request mapping, error mapping). How its
stream is read (the provider's SSE bytes parsed here, the SDK's chunk objects, or litellm's
``CustomStreamWrapper`` when litellm callbacks are configured) is in
:mod:`threadline.runtime.model.llm_stream`; every path yields the same chunk dicts and fills the same
:class:`ModelOutcome`. litellm's cost estimate for a stream it has just opened (always 0 or
``None``, ~1 ms of CPU) is skipped when no litellm callback is configured
(:func:`threadline.runtime.model._litellm_private.no_open_cost_estimate`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm
import openai
import orjson
from litellm import exceptions as lx

litellm.suppress_debug_info = True
litellm.drop_params = True

from threadline._internal import step_clock  # noqa: E402 - after litellm is configured above
from threadline.errors import ModelCallError  # noqa: E402 - after litellm is configured above
from threadline.runtime.message_types import CoreMessage, ToolSpec  # noqa: E402 - after litellm is configured above
from threadline.runtime.model import llm_direct, llm_normalise, llm_stream, providers  # noqa: E402 - after litellm is configured above
from threadline.runtime.model import provider_options as provider_opts  # noqa: E402 - after litellm is configured above
from threadline.runtime.model._litellm_private import no_open_cost_estimate  # noqa: E402 - after litellm is configured above
from threadline.runtime.model.model_outcome import ModelOutcome  # noqa: E402 - after litellm is configured above
from threadline.runtime.model.provider_error import bare_message, provider_error  # noqa: E402 - after litellm is configured above
from threadline.runtime.model.retry_after import retry_after_s  # noqa: E402 - after litellm is configured above

ERROR_KINDS = ("context_length_exceeded", "rate_limit", "bad_request", "service_unavailable",
               "timeout", "authentication", "not_found", "server_error", "connection", "structured_output",
               "stream_interrupted", "bad_response")
"""What processors see in ``error.kind``."""

LOCAL_MARKER = "threadline-"
"""Model names containing this (e.g. ``openai/threadline-fake``) go to the local model server."""
NO_KEY = "no-key"
"""The bearer sent to a model config's ``url`` that has no ``apiKey`` (the openai client needs one)."""


def _chain(exc: BaseException) -> list[BaseException]:
    return llm_stream.exception_chain(exc)


def _embedded_status(exc: BaseException) -> int | None:
    """Status code of an in-band stream error (``data: {"error": {"code": 429, …}}``), which
    litellm drops from the exception it raises but keeps on the wrapped openai error."""
    for x in _chain(exc):
        for candidate in (getattr(x, "code", None), (getattr(x, "body", None) or {}).get("code")
                          if isinstance(getattr(x, "body", None), dict) else None):
            try:
                code = int(candidate)  # type: ignore[arg-type]  # any attribute value; ValueError/TypeError are caught
            except (TypeError, ValueError):
                continue
            if 400 <= code <= 599:
                return code
    return None


def classify(exc: BaseException) -> ModelCallError:
    """Map a litellm / openai exception to a :class:`ModelCallError` with a ``kind``.

    Mid-stream failures (litellm's ``MidStreamFallbackError``) are classified by the error they
    wrap, including the status code of an in-band error event.
    """
    original = exc
    if isinstance(exc, lx.MidStreamFallbackError):
        inner = getattr(exc, "original_exception", None)
        embedded = _embedded_status(exc)
        if isinstance(inner, lx.ContextWindowExceededError | lx.RateLimitError):
            mapped = classify(inner)
            mapped.__cause__ = original
            return mapped
        if embedded is not None:
            mapped = _by_status(embedded, bare_message(str(getattr(exc, "message", None) or exc))[:500],
                                _retry_after(exc))
            mapped.__cause__ = original
            return mapped
    status = getattr(exc, "status_code", None)
    message = bare_message(str(getattr(exc, "message", None) or exc))[:500]
    retry_after = _retry_after(exc)
    if isinstance(exc, lx.ContextWindowExceededError):
        kind, retryable = "context_length_exceeded", False
    elif isinstance(exc, lx.RateLimitError) or status == 429:
        kind, retryable = "rate_limit", True
    elif isinstance(exc, lx.Timeout):
        kind, retryable = "timeout", True
    elif _never_answered(exc):  # litellm reports a refused or dropped connection as a 500
        kind, retryable, status = "connection", True, None
    elif isinstance(exc, lx.AuthenticationError | lx.PermissionDeniedError):
        kind, retryable = "authentication", False
    elif isinstance(exc, lx.NotFoundError):
        kind, retryable = "not_found", False
    elif isinstance(exc, lx.BadRequestError | lx.UnprocessableEntityError):
        kind, retryable = "bad_request", False
    elif isinstance(exc, lx.ServiceUnavailableError) or status == 503:
        kind, retryable = "service_unavailable", True
    elif isinstance(exc, lx.InternalServerError) or (isinstance(status, int) and status >= 500):
        kind, retryable = "server_error", True
    elif isinstance(exc, lx.APIConnectionError):
        kind, retryable = "connection", True
    else:
        kind, retryable = "server_error", True
    err = ModelCallError(message, kind=kind, status_code=status, retry_after_s=retry_after,
                         retryable=retryable)
    err.__cause__ = original
    return err


def _never_answered(exc: BaseException) -> bool:
    """The request never got an HTTP answer: the innermost openai SDK error of the chain (what
    the SDK raised; litellm's own exceptions, outside it, subclass the SDK's) is its
    ``APIConnectionError``, not its timeout."""
    inner = [x for x in _chain(exc) if isinstance(x, openai.APIError)]
    return bool(inner) and isinstance(inner[-1], openai.APIConnectionError) and \
        not isinstance(inner[-1], openai.APITimeoutError)


def _by_status(status: int, message: str, retry_after: float | None) -> ModelCallError:
    if status == 429:
        kind, retryable = "rate_limit", True
    elif status == 503:
        kind, retryable = "service_unavailable", True
    elif status in (400, 413, 422):
        kind, retryable = "bad_request", False
    elif status in (401, 403):
        kind, retryable = "authentication", False
    elif status == 404:
        kind, retryable = "not_found", False
    else:
        kind, retryable = "server_error", True
    return ModelCallError(message, kind=kind, status_code=status, retry_after_s=retry_after,
                          retryable=retryable)


def _retry_after(exc: BaseException) -> float | None:
    """The wait the error answer's headers ask for (:func:`retry_after_s`); ``None``: none."""
    headers = getattr(getattr(exc, "response", None), "headers", None)
    return retry_after_s(headers) if isinstance(headers, Mapping) else None


def call_kwargs(model: str, *, api_base: str | None, timeout_s: float, api_key: str | None = None,
                direct_url: bool = False) -> dict[str, Any]:
    """litellm arguments that route ``model``: local model names go to ``api_base``; Mastra's
    provider ids and key variables are mapped to litellm's (:mod:`threadline.runtime.model.providers`).
    ``direct_url``: a model config object's ``url`` (``api_base``) and ``api_key``: the model
    (its id after the provider prefix) is called as an OpenAI-compatible endpoint there, as
    Mastra calls a config with a ``url``.

    Raises:
        ModelCallError: kind ``authentication`` when the provider's API key is not set.
    """
    if direct_url and api_base:
        name = model.split("/", 1)[1] if "/" in model else model
        return {"model": f"openai/{name}", "timeout": timeout_s, "num_retries": 0, "max_retries": 0,
                "api_base": api_base, "api_key": api_key or NO_KEY}
    local = bool(api_base) and LOCAL_MARKER in model
    if local:
        known = providers.PROVIDERS.get(providers.provider_of(model) or "")
        name = f"{known.litellm}/{model.split('/', 1)[1]}" if known else model
        if name.startswith("anthropic/") and api_base and api_base.rstrip("/").endswith("/v1"):
            api_base = api_base.rstrip("/")[:-3]  # litellm appends /v1/messages to an Anthropic base
        return {"model": name, "timeout": timeout_s, "num_retries": 0, "max_retries": 0,
                "api_base": api_base, "api_key": "threadline-local"}
    routed = providers.route(model)
    kwargs: dict[str, Any] = {"model": routed.model, "timeout": timeout_s, "num_retries": 0, "max_retries": 0}
    if routed.api_key is not None:
        kwargs["api_key"] = routed.api_key
    return kwargs


async def stream_model(*, model: str, messages: list[CoreMessage], tools: list[ToolSpec] | None,
                       tool_choice: object, model_settings: Mapping[str, object] | None,
                       provider_options: Mapping[str, object] | None, api_base: str | None,
                       timeout_s: float, outcome: ModelOutcome,
                       response_format: Mapping[str, object] | None = None, api_key: str | None = None,
                       direct_url: bool = False) -> AsyncIterator[dict[str, Any]]:
    """Call the model and yield Mastra chunks (``{type, payload}``); fill ``outcome``.

    Yields ``text-start``/``text-delta``/``text-end``, ``reasoning-delta``,
    ``tool-call-input-streaming-start``/``tool-call-delta``/``tool-call-input-streaming-end`` and
    ``tool-call`` (with parsed ``args``), by the rules of :mod:`threadline.runtime.model.llm_normalise`
    (docs/decisions.md §20), the same on every read path. The finish reason is ``tool-calls``
    whenever tool calls were streamed, whatever the provider said (C13).

    Raises:
        ModelCallError: any failure, before or during the stream (in-band errors included); kind
            ``stream_interrupted`` for a stream cut off or ended without a finish reason or
            ``[DONE]``, ``bad_response`` for an empty or non-SSE
            ``200`` body (both retryable).
    """
    kwargs = request_kwargs(model, messages=messages, tools=tools, tool_choice=tool_choice,
                            model_settings=model_settings, provider_options=provider_options, api_base=api_base,
                            timeout_s=timeout_s, response_format=response_format, api_key=api_key,
                            direct_url=direct_url)
    norm: llm_normalise.StreamNormaliser | None = None
    stream: Any = None
    try:
        step_clock.mark("model_called")
        path, response, provider_stream = await _open(kwargs, outcome)
        step_clock.mark("model_opened")
        outcome.headers = _headers(provider_stream)
        if path == "wrapper":
            watch = llm_stream.watch_raw(response)
            chunks: Any = llm_stream.wrapper_chunks(response)
        else:
            watch = {"usage": True, "events": 0, "clean_end": False}  # straight from the provider: never invented
            chunks = stream = llm_stream.provider_chunks(provider_stream, model, raw=path == "raw", watch=watch)
        # litellm invents usage the provider never sent (C13): taken only when the provider sent one
        norm = llm_normalise.StreamNormaliser(outcome, take_usage=False)
        async with contextlib.aclosing(_normalised(chunks, norm, watch, wrapper=path == "wrapper")) as events:
            async for event in events:
                yield event
    except ModelCallError:
        raise
    except Exception as exc:
        err = _classify_stream(exc, opened=norm is not None)
        err.provider = provider_error(exc, retryable=err.retryable, request_body=outcome.request_body,
                                      opened=norm is not None)
        hint = providers.key_hint(model)
        if err.kind == "authentication" and hint:  # say which variable holds the rejected key
            err.args = (f"{err.args[0]} ({hint})",)
        raise err from exc
    finally:
        if stream is not None:  # closed with us (a tripwire or an abort closes the HTTP stream now)
            await stream.aclose()
    for event in norm.end():
        yield event


def _headers(provider_stream: object) -> dict[str, str] | None:
    """The provider's HTTP response headers, where the read path holds its ``httpx.Response``
    (the direct path and the openai SDK's stream); ``None`` under litellm's wrapper."""
    headers = getattr(getattr(provider_stream, "response", None), "headers", None)
    return dict(headers.items()) if headers is not None and hasattr(headers, "items") else None


def request_kwargs(model: str, *, messages: list[CoreMessage], tools: list[ToolSpec] | None,
                   tool_choice: object, model_settings: Mapping[str, object] | None,
                   provider_options: Mapping[str, object] | None, api_base: str | None, timeout_s: float,
                   response_format: Mapping[str, object] | None, api_key: str | None = None,
                   direct_url: bool = False) -> dict[str, Any]:
    """The keyword arguments of ``litellm.acompletion`` for one streamed call: the route, the
    prompt (provider options on its messages), tools, settings under litellm's names, structured
    output and the provider's request options (which never reroute the call or replace the prompt).

    As Mastra's request: tools go with ``tool_choice`` (``"auto"`` unless one was given), and
    ``tool_choice: "none"`` sends neither; ``modelSettings`` names (``maxOutputTokens``, ``topP``,
    ``stopSequences``…) become the request's (``max_tokens``, ``top_p``, ``stop``…)."""
    kwargs = call_kwargs(model, api_base=api_base, timeout_s=timeout_s, api_key=api_key, direct_url=direct_url)
    kwargs.update(messages=provider_opts.prepare_messages(messages, model), stream=True,
                  stream_options={"include_usage": True})
    if tools and tool_choice != "none":  # as Mastra: "none" sends neither the tools nor the choice
        kwargs["tools"] = tools
        kwargs["tool_choice"] = "auto" if tool_choice is None else _tool_choice(tool_choice)
    for key, value in (model_settings or {}).items():
        if value is not None and key not in _NOT_SENT:
            kwargs[_SETTINGS.get(key, key)] = value
    if response_format is not None:  # structured output (threadline.runtime.model.structured)
        kwargs["response_format"] = response_format
    for key, value in provider_opts.request_options(provider_options, model).items():
        if key not in _CORE:
            kwargs[key] = value
    return kwargs


async def _open(kwargs: dict[str, Any], outcome: ModelOutcome) -> tuple[str, Any, Any]:
    """Open the call: sent directly when :func:`llm_direct.prepare` takes it (a ``422`` asks
    again through litellm), else ``litellm.acompletion``. Returns the read path (``raw``, ``sdk``
    or ``wrapper``), litellm's response (``None`` when sent directly) and the provider stream;
    ``outcome.request_body`` is the body sent directly."""
    if (request := llm_direct.prepare(kwargs)) is not None:
        outcome.request_body = orjson.loads(request.body)  # an error answer reports it too
        provider_stream = await llm_direct.open_stream(request, kwargs["model"])  # None: a 422, litellm asks again
        if provider_stream is not None:
            return "raw", None, provider_stream
        outcome.request_body = None
    with no_open_cost_estimate():
        response = await litellm.acompletion(**kwargs)
    return llm_stream.reader(response), response, getattr(response, "completion_stream", None)


async def _normalised(chunks: Any, norm: llm_normalise.StreamNormaliser, watch: llm_stream.StreamWatch, *,
                      wrapper: bool) -> AsyncGenerator[dict[str, Any], None]:
    """The stream's Mastra chunks, by the rules of :mod:`.llm_normalise`.

    Raises:
        ModelCallError: ``bad_response`` for an empty or non-SSE ``200`` body.
        ModelCallError: ``stream_interrupted`` for a body that ended after data without a finish
            reason or ``[DONE]`` (§20).
        Exception: what reading the stream raised (litellm's wrapper's refusal of a stream that
            ended with ``[DONE]`` but no finish reason excepted, §20).
    """
    try:
        async for chunk in chunks:
            norm.take_usage = bool(watch["usage"])
            for event in norm.feed(chunk):
                yield event
    except Exception as exc:
        if wrapper and watch["clean_end"] and not watch["events"]:
            raise llm_normalise.bad_response() from exc  # whatever the wrapper made of an empty body
        if not (wrapper and llm_stream.clean_eof_refused(exc, watch)):
            raise
        if not watch.get("done"):
            raise llm_normalise.unfinished() from exc
        # litellm's wrapper refuses a stream that ended with [DONE] but no finish reason (§20),
        # before handing over the usage it held back
        if watch.get("last_usage"):
            norm.outcome.usage = llm_normalise.usage(watch["last_usage"])
            norm.outcome.raw_usage = llm_normalise.as_json(watch["last_usage"])
    if not watch["events"]:  # an empty or non-SSE 200 body, on every path alike
        raise llm_normalise.bad_response()
    if norm.outcome.raw_finish_reason is None and not watch.get("done"):  # it never said it ended
        raise llm_normalise.unfinished()


def _classify_stream(exc: BaseException, *, opened: bool) -> ModelCallError:
    """:func:`classify`, except that a stream that was opened and then cut off (the connection
    dropped, the body incomplete; not a timeout) is ``stream_interrupted`` (§20)."""
    if opened:
        chain = _chain(exc)
        if not any(isinstance(x, llm_stream.TIMEOUTS) for x in chain) and \
                any(isinstance(x, llm_stream.CUT_OFF) for x in chain):
            return llm_normalise.interrupted(exc)
    return classify(exc)


_CORE = frozenset({"model", "messages", "stream", "stream_options", "tools", "api_base", "api_key", "timeout",
                   "num_retries", "max_retries", "response_format"})
_SETTINGS = {"max_tokens": "max_tokens", "maxTokens": "max_tokens", "maxOutputTokens": "max_tokens",
             "topP": "top_p", "topK": "top_k", "presencePenalty": "presence_penalty",
             "frequencyPenalty": "frequency_penalty", "stopSequences": "stop"}
"""Mastra's ``modelSettings`` names (the AI SDK's call settings) → the request's."""
_NOT_SENT = frozenset({"max_retries", "maxRetries", "timeout"})
"""Settings of the call itself (retries, time limits), never request fields."""


def _tool_choice(choice: object) -> object:
    if isinstance(choice, dict) and choice.get("type") == "tool":
        return {"type": "function", "function": {"name": choice.get("toolName") or choice.get("tool_name")}}
    return choice
