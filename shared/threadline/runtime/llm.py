"""The one adapter around litellm (K5): streams Mastra chunks, assembles tool calls by index,
decides the step's finish reason from what was streamed, takes usage from wherever it arrives,
and maps every litellm exception to a small set of error kinds before processors see it.

Every call is ``litellm.acompletion`` (routing, auth, request mapping, error mapping). When the
provider stream litellm opened is an OpenAI-compatible ``openai.AsyncStream`` and no litellm
callback is configured, its chunks are read directly (:func:`_provider_chunks`) instead of
through litellm's ``CustomStreamWrapper``: the wrapper re-builds every chunk as its own model,
accumulates the text, and assembles the whole response again at the end for its logging and cost
callbacks, ~0.3 ms of CPU per chunk against ~0.08 ms for the provider stream itself (profile in
docs/benchmarks.md). Errors on that path still go through litellm's exception mapping; a stream
that ends without a finish reason fails as it does in the wrapper. With callbacks configured
(``litellm.callbacks``, ``success_callback``, …) the wrapper is used, so they see every call.
"""

from __future__ import annotations

import os
import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import httpx  # noqa: E402
import litellm  # noqa: E402
import openai  # noqa: E402
from litellm import exceptions as lx  # noqa: E402
from litellm.litellm_core_utils.exception_mapping_utils import exception_type  # noqa: E402

litellm.suppress_debug_info = True
litellm.drop_params = True

from threadline.errors import ModelCallError  # noqa: E402

ERROR_KINDS = ("context_length_exceeded", "rate_limit", "bad_request", "service_unavailable",
               "timeout", "authentication", "not_found", "server_error", "connection")
"""What processors see in ``error.kind``."""

_FINISH = {"stop": "stop", "tool_calls": "tool-calls", "function_call": "tool-calls",
           "length": "length", "content_filter": "content-filter"}
LOCAL_MARKER = "threadline-"
"""Model names containing this (e.g. ``openai/threadline-fake``) go to the local model server."""


@dataclass(slots=True)
class ModelOutcome:
    """What one model call produced (filled while streaming)."""

    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str = "other"
    usage: dict[str, Any] | None = None
    raw_finish_reason: str | None = None


def _chain(exc: BaseException) -> list[BaseException]:
    out, stack, seen = [], [exc], set()
    while stack:
        x = stack.pop()
        if x is None or id(x) in seen:
            continue
        seen.add(id(x))
        out.append(x)
        stack += [getattr(x, "original_exception", None), x.__cause__, x.__context__]
    return out


def _embedded_status(exc: BaseException) -> int | None:
    """Status code of an in-band stream error (``data: {"error": {"code": 429, …}}``), which
    litellm drops from the exception it raises but keeps on the wrapped openai error."""
    for x in _chain(exc):
        for candidate in (getattr(x, "code", None), (getattr(x, "body", None) or {}).get("code")
                          if isinstance(getattr(x, "body", None), dict) else None):
            try:
                code = int(candidate)  # type: ignore[arg-type]
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
            mapped = _by_status(embedded, str(getattr(exc, "message", None) or exc)[:500], _retry_after(exc))
            mapped.__cause__ = original
            return mapped
    status = getattr(exc, "status_code", None)
    message = str(getattr(exc, "message", None) or exc)[:500]
    retry_after = _retry_after(exc)
    if isinstance(exc, lx.ContextWindowExceededError):
        kind, retryable = "context_length_exceeded", False
    elif isinstance(exc, lx.RateLimitError) or status == 429:
        kind, retryable = "rate_limit", True
    elif isinstance(exc, lx.Timeout):
        kind, retryable = "timeout", True
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
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if not headers:
        return None
    for name in ("retry-after", "Retry-After"):
        value = headers.get(name)
        if value:
            try:
                return float(value)
            except ValueError:
                return None
    ms = headers.get("retry-after-ms")
    return float(ms) / 1000 if ms else None


def call_kwargs(model: str, *, api_base: str | None, timeout_s: float) -> dict[str, Any]:
    """litellm arguments that route ``model``: local model names go to ``api_base``."""
    kwargs: dict[str, Any] = {"model": model, "timeout": timeout_s, "num_retries": 0, "max_retries": 0}
    if api_base and LOCAL_MARKER in model:
        kwargs["api_base"] = api_base
        kwargs["api_key"] = "threadline-local"
    return kwargs


async def stream_model(*, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                       tool_choice: Any, model_settings: dict[str, Any] | None,
                       provider_options: dict[str, Any] | None, api_base: str | None,
                       timeout_s: float, outcome: ModelOutcome) -> AsyncIterator[dict[str, Any]]:
    """Call the model and yield Mastra chunks (``{type, payload}``); fill ``outcome``.

    Yields ``text-start``/``text-delta``/``text-end``, ``reasoning-delta``,
    ``tool-call-input-streaming-start``/``tool-call-delta``/``tool-call-input-streaming-end`` and
    ``tool-call`` (with parsed ``args``). The finish reason is ``tool-calls`` whenever tool calls
    were streamed, whatever the provider said (C13).

    Raises:
        ModelCallError: any failure, before or during the stream (in-band errors included).
    """
    kwargs = call_kwargs(model, api_base=api_base, timeout_s=timeout_s)
    kwargs.update(messages=messages, stream=True, stream_options={"include_usage": True})
    if tools:
        kwargs["tools"] = tools
        if tool_choice is not None:
            kwargs["tool_choice"] = _tool_choice(tool_choice)
    for key, value in (model_settings or {}).items():
        if value is not None and key not in ("max_retries", "timeout"):
            kwargs[_SETTINGS.get(key, key)] = value
    if provider_options:
        kwargs.update(provider_options.get(model.split("/", 1)[0], {}))
    text_open = False
    calls: dict[int, dict[str, Any]] = {}
    direct: Any = None
    try:
        response = await litellm.acompletion(**kwargs)
        if _direct(response):
            reported: dict[str, bool] = {"usage": True}  # straight from the provider: never invented
            chunks: Any = _provider_chunks(response.completion_stream, model)
            direct = chunks
        else:
            reported = _spy_usage(response)
            chunks = response
        async for chunk in chunks:
            usage = getattr(chunk, "usage", None)
            if usage and reported["usage"]:  # litellm invents usage the provider never sent (C13)
                outcome.usage = _usage(usage)
            choices = getattr(chunk, "choices", None) or []
            if not choices:
                continue
            choice = choices[0]
            delta = getattr(choice, "delta", None)
            if delta is not None:
                reasoning = getattr(delta, "reasoning_content", None)
                if reasoning:
                    yield {"type": "reasoning-delta", "payload": {"id": "r0", "text": reasoning}}
                content = getattr(delta, "content", None)
                if content:
                    if not text_open:
                        text_open = True
                        yield {"type": "text-start", "payload": {"id": "t0"}}
                    outcome.text += content
                    yield {"type": "text-delta", "payload": {"id": "t0", "text": content}}
                for tc in getattr(delta, "tool_calls", None) or []:
                    index = getattr(tc, "index", 0) or 0
                    fn = getattr(tc, "function", None)
                    entry = calls.get(index)
                    if entry is None:
                        entry = calls[index] = {"toolCallId": getattr(tc, "id", None) or f"call_{index}",
                                                "toolName": getattr(fn, "name", None) or "", "argsText": ""}
                        yield {"type": "tool-call-input-streaming-start",
                               "payload": {"toolCallId": entry["toolCallId"], "toolName": entry["toolName"]}}
                    elif getattr(fn, "name", None) and not entry["toolName"]:
                        entry["toolName"] = fn.name
                    args = getattr(fn, "arguments", None)
                    if args:
                        entry["argsText"] += args
                        yield {"type": "tool-call-delta",
                               "payload": {"toolCallId": entry["toolCallId"], "argsTextDelta": args,
                                           "toolName": entry["toolName"]}}
            if getattr(choice, "finish_reason", None):
                outcome.raw_finish_reason = choice.finish_reason
    except ModelCallError:
        raise
    except Exception as exc:  # noqa: BLE001 - every provider failure is mapped
        raise classify(exc) from exc
    finally:
        if direct is not None:  # closed with us (a tripwire or an abort closes the HTTP stream now)
            await direct.aclose()
    if text_open:
        yield {"type": "text-end", "payload": {"id": "t0"}}
    for entry in calls.values():
        try:
            args = orjson.loads(entry["argsText"]) if entry["argsText"].strip() else {}
        except orjson.JSONDecodeError:
            args = {"__raw": entry["argsText"]}
        call = {"toolCallId": entry["toolCallId"], "toolName": entry["toolName"], "args": args}
        outcome.tool_calls.append(call)
        yield {"type": "tool-call-input-streaming-end", "payload": {"toolCallId": entry["toolCallId"]}}
        yield {"type": "tool-call", "payload": dict(call)}
    raw = outcome.raw_finish_reason
    if calls and raw != "length":
        outcome.finish_reason = "tool-calls"
    else:
        outcome.finish_reason = _FINISH.get(raw or "", "other")


_CALLBACK_LISTS = ("callbacks", "success_callback", "_async_success_callback", "failure_callback",
                   "_async_failure_callback", "input_callback", "_async_input_callback", "service_callback")


def _direct(response: Any) -> bool:
    """Read the provider stream directly? Only an OpenAI-compatible stream, and only when no
    litellm callback would miss the call's success or failure."""
    return isinstance(getattr(response, "completion_stream", None), openai.AsyncStream) and not any(
        getattr(litellm, name, None) for name in _CALLBACK_LISTS)


async def _provider_chunks(stream: Any, model: str) -> AsyncIterator[Any]:
    """The provider's chunks (``ChatCompletionChunk``); a failure is raised as litellm's
    wrapper raises it (mapped by ``exception_type``; a client error as is, anything else as
    ``MidStreamFallbackError``), so :func:`classify` sees the same exceptions on both paths.
    A stream that ends without a finish reason fails as in the wrapper."""
    provider, _, name = model.partition("/") if "/" in model else ("openai", "", model)
    finished, sent = False, False
    try:
        async for chunk in stream:
            for choice in chunk.choices or ():
                if choice.finish_reason:
                    if choice.finish_reason == "abort":
                        raise lx.InternalServerError(message="Upstream generation aborted (finish_reason=abort)",
                                                     model=name, llm_provider=provider)
                    finished = True
            sent = True
            yield chunk
        if not finished:
            raise httpx.RemoteProtocolError("Stream ended before a finish_reason was received",
                                            request=httpx.Request("POST", "https://provider.invalid"))
    except (GeneratorExit, asyncio.CancelledError):
        raise
    except Exception as exc:  # noqa: BLE001 - mapped like litellm maps a failing stream
        raise _stream_failure(exc, name, provider, sent) from exc
    finally:
        await stream.close()


def _stream_failure(exc: Exception, model: str, provider: str, sent: bool) -> Exception:
    if isinstance(exc, lx.MidStreamFallbackError):
        mapped: Exception = exc
    else:
        try:
            mapped = exception_type(model=model, original_exception=exc, custom_llm_provider=provider)
        except Exception as raised:  # noqa: BLE001 - exception_type raises the mapped exception
            mapped = raised
    if isinstance(mapped, lx.MidStreamFallbackError):
        return mapped
    status = _status_of(mapped) or _status_of(exc)
    timeout = isinstance(exc, httpx.TimeoutException)
    if not timeout and status is not None and 400 <= status < 500 and status != 429:
        return mapped
    return lx.MidStreamFallbackError(message=str(mapped), model=model, llm_provider=provider,
                                     original_exception=mapped, is_pre_first_chunk=not sent)


def _status_of(exc: BaseException) -> int | None:
    for candidate in (getattr(exc, "status_code", None), getattr(getattr(exc, "response", None), "status_code", None)):
        try:
            if candidate is not None:
                return int(candidate)
        except (TypeError, ValueError):
            continue
    return None


def _spy_usage(response: Any) -> dict[str, bool]:
    """Watch the provider's raw stream for a usage report, so a usage that litellm computed
    itself is not mistaken for one the provider reported."""
    seen = {"usage": False}
    raw = getattr(response, "completion_stream", None)
    if raw is None:
        seen["usage"] = True  # not a wrapper we can watch: trust what litellm hands over
        return seen

    async def spy() -> Any:
        async for chunk in raw:
            if getattr(chunk, "usage", None) or (isinstance(chunk, dict) and chunk.get("usage")):
                seen["usage"] = True
            yield chunk

    response.completion_stream = spy()
    return seen


_SETTINGS = {"max_tokens": "max_tokens", "maxTokens": "max_tokens", "topP": "top_p"}


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, dict) and choice.get("type") == "tool":
        return {"type": "function", "function": {"name": choice.get("toolName") or choice.get("tool_name")}}
    return choice


def _usage(usage: Any) -> dict[str, Any]:
    get = usage.get if isinstance(usage, dict) else lambda k, d=None: getattr(usage, k, d)
    inp, out = get("prompt_tokens", None), get("completion_tokens", None)
    total = get("total_tokens", None)
    return {"inputTokens": inp, "outputTokens": out,
            "totalTokens": total if total is not None else (inp or 0) + (out or 0)}
