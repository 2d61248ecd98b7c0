"""The model call sent by Threadline itself, for the calls litellm would send with the openai
client: litellm still routes it (``get_llm_provider``), maps its parameters
(``get_optional_params``) and builds its body (``OpenAIGPTConfig.transform_request``) — with one
change: an assistant message with tool calls keeps its ``content: null``, which litellm drops and
Mastra sends; this module only sends that body over the HTTP client litellm gives its openai
clients (one per event loop) and hands the response to :mod:`threadline.runtime.model.llm_stream`'s
SSE reader (its ``raw`` path).

Around a short call, ``litellm.acompletion`` spends ~2.5 ms of CPU outside those three steps
(its logging object and callbacks set-up, ``completion()`` in a thread of the loop's default
executor, the openai client's request building, a ``CustomStreamWrapper`` nobody reads);
bench/results/HISTORY.md, "The model call sent directly".

A failure is raised as litellm raises it: the openai SDK's own exception for the response
(``AsyncOpenAI._make_status_error_from_response``, ``APITimeoutError``, ``APIConnectionError``),
wrapped as litellm's OpenAI handler wraps it (``OpenAIError``) and mapped by litellm's
``exception_type``, so :func:`threadline.runtime.model.llm.classify` sees the same exceptions.

Only calls whose every argument is in :data:`_ARGS`, for litellm's ``openai`` provider, with no
litellm callback configured and no openai client setting read from litellm's globals or the
environment that this path would not apply (an organization, a project, a base URL), are sent
here (:func:`prepare`); every other call, and any call answered ``422`` (litellm then drops the
parameters the provider refused and asks again), goes through ``litellm.acompletion``.
``THREADLINE_MODEL_DIRECT=0`` turns the path off.
"""

from __future__ import annotations

import asyncio
import functools
import os
import ssl
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import litellm
import openai
import orjson

from threadline.config import get_settings
from threadline.runtime.model._litellm_private import (
    BaseOpenAILLM,
    OpenAIError,
    OpenAIGPTConfig,
    callbacks_configured,
    exception_type,
    get_litellm_params,
    upstream_error_response,
    validate_and_fix_openai_messages,
    validate_and_fix_openai_tools,
    validate_chat_completion_tool_choice,
)

_ARGS = frozenset({"model", "messages", "stream", "stream_options", "tools", "tool_choice", "api_base", "api_key",
                   "timeout", "num_retries", "max_retries", "response_format", "temperature", "top_p", "n", "stop",
                   "max_tokens", "presence_penalty", "frequency_penalty", "logit_bias", "user", "seed",
                   "parallel_tool_calls"})
"""The arguments this path maps exactly as litellm does; any other sends the call through litellm."""
_MAPPED = _ARGS - {"model", "api_base", "api_key", "timeout", "num_retries", "max_retries"}
_ENV_SETTINGS = ("OPENAI_BASE_URL", "OPENAI_API_BASE", "OPENAI_ORG_ID", "OPENAI_ORGANIZATION", "OPENAI_PROJECT_ID",
                 "OPENAI_WEBHOOK_SECRET")
"""Settings the openai client would read from the environment: with one set, litellm sends.
(Proxies and TLS settings are the HTTP client's, which is litellm's own: :func:`_client`.)"""
_GLOBAL_SETTINGS = ("api_base", "organization", "headers", "client_session", "aclient_session", "network_mock")
"""litellm's globals that change what its openai client sends; with one set, litellm sends."""
_DEFAULT_BASE = "https://api.openai.com/v1"
_CONFIG = OpenAIGPTConfig()
_REQUEST_ERRORS = (httpx.RequestError, ssl.SSLError, anyio.EndOfStream)


@dataclass(frozen=True)
class Request:
    """A built call: ``url``, ``headers``, the JSON ``body`` (bytes), ``timeout_s`` (seconds,
    per connect and per read), the provider's model ``name``."""

    url: str
    headers: dict[str, str]
    body: bytes
    timeout_s: float
    name: str


def prepare(kwargs: dict[str, Any]) -> Request | None:
    """The call ``litellm.acompletion(**kwargs)`` would make, built by litellm, when this path
    sends it exactly as litellm would (module docstring); else ``None``."""
    if not _eligible(kwargs):
        return None
    api_base = kwargs.get("api_base")
    name, provider, _, _ = litellm.get_llm_provider(kwargs["model"], api_base=api_base)
    key = kwargs.get("api_key") or litellm.api_key or litellm.openai_key or os.environ.get("OPENAI_API_KEY")
    if provider != "openai" or not key:
        return None
    base = (api_base or _DEFAULT_BASE).rstrip("/")
    body = _body(kwargs, name, api_base, key)
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json", "Accept": "application/json"}
    return Request(url=f"{base}/chat/completions", headers=headers, body=orjson.dumps(body),
                   timeout_s=float(kwargs.get("timeout") or 600.0), name=name)


def _eligible(kwargs: Mapping[str, object]) -> bool:
    """The path is on, the call streams, no litellm callback is set, every argument is one this
    path maps, no retries are asked of litellm and no openai client setting comes from litellm's
    globals or the environment."""
    if not get_settings().model_direct or not kwargs.get("stream") or callbacks_configured():
        return False
    if not _ARGS.issuperset(kwargs) or kwargs.get("num_retries") or kwargs.get("max_retries"):
        return False
    return not (any(os.environ.get(name) for name in _ENV_SETTINGS)
                or any(getattr(litellm, name, None) for name in _GLOBAL_SETTINGS))


def _body(kwargs: dict[str, Any], name: str, api_base: str | None, key: str) -> dict[str, Any]:
    """The request body litellm's openai path would send for ``kwargs`` (model ``name``)."""
    # what litellm's completion() does first: messages and tools validated, tool_choice checked
    messages = validate_and_fix_openai_messages(messages=kwargs["messages"])
    params = {k: v for k, v in kwargs.items() if k in _MAPPED and k != "messages"}
    if "tools" in params:
        params["tools"] = validate_and_fix_openai_tools(tools=params["tools"])
    if "tool_choice" in params:
        params["tool_choice"] = validate_chat_completion_tool_choice(tool_choice=params["tool_choice"],
                                                                     model=kwargs["model"])
    optional = litellm.get_optional_params(model=name, custom_llm_provider="openai", max_retries=0,
                                           messages=messages, **params)
    # the parameters completion() hands the transformation: the endpoint decides whether Anthropic's
    # cache marks are kept (a custom base) or stripped (api.openai.com), and how tools are sanitized
    litellm_params = get_litellm_params(custom_llm_provider="openai", api_base=api_base, api_key=key)
    body: dict[str, Any] = _CONFIG.transform_request(model=name, messages=messages, optional_params=optional,
                                                     litellm_params=litellm_params, headers={})
    _null_contents(kwargs["messages"], body.get("messages"))
    body["stream"] = True
    if kwargs.get("stream_options") is not None:
        body["stream_options"] = kwargs["stream_options"]
    body.update(body.pop("extra_body", None) or {})  # the openai client merges extra_body into the body
    return body


def _null_contents(sent: list[dict[str, Any]], built: object) -> None:
    """Put back ``content: null`` on the built assistant messages with tool calls whose content
    was ``None`` (litellm drops the key; OpenAI's API and Mastra's requests carry the null)."""
    if not isinstance(built, list) or len(built) != len(sent):
        return
    for original, message in zip(sent, built, strict=True):
        if (isinstance(message, dict) and message.get("role") == "assistant" and message.get("tool_calls")
                and "content" not in message and original.get("content", ...) is None):
            message["content"] = None


class Opened:
    """What :func:`open_stream` returns, shaped as ``llm_stream.provider_chunks`` reads the
    openai stream: ``response`` (the ``httpx.Response`` being streamed) and ``close()``."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response

    async def close(self) -> None:
        await self.response.aclose()


async def open_stream(request: Request, model: str) -> Opened | None:
    """Send ``request`` and return its open stream once the provider's headers are in;
    ``None`` when the provider answered ``422`` (the caller goes through litellm, which drops
    the refused parameters and asks again). ``model``: the model as litellm was given it.

    Raises:
        litellm.exceptions.*: the provider's refusal or a transport failure, mapped by litellm.
    """
    client = _client()
    http = client.build_request("POST", request.url, headers=request.headers, content=request.body,
                                timeout=httpx.Timeout(request.timeout_s))
    try:
        try:
            try:
                response = await client.send(http, stream=True)
            except httpx.TimeoutException as exc:
                raise openai.APITimeoutError(request=http) from exc  # type: ignore[arg-type]  # see _sdk()
            except _REQUEST_ERRORS as exc:
                raise openai.APIConnectionError(request=http) from exc  # type: ignore[arg-type]  # see _sdk()
            if response.status_code < 400:
                return Opened(response)
            try:
                await response.aread()
            finally:
                await response.aclose()
            if response.status_code == 422:
                return None
            raise _sdk()._make_status_error_from_response(response)  # type: ignore[arg-type]  # see _sdk()
        except openai.APIError as exc:
            raise _as_litellm_handler_error(exc) from exc
    except OpenAIError as exc:
        raise exception_type(model=model, custom_llm_provider="openai", original_exception=exc,
                             completion_kwargs={}, extra_kwargs={}) from exc


def _as_litellm_handler_error(exc: openai.APIError) -> OpenAIError:
    """The ``OpenAIError`` litellm's OpenAI handler raises for the SDK's ``exc`` (no response read)."""
    headers = getattr(exc, "headers", None)
    response = getattr(exc, "response", None)
    if headers is None and response is not None:
        headers = getattr(response, "headers", None)
    body = getattr(exc, "body", None)
    if hasattr(exc, "status_code"):
        return OpenAIError(status_code=exc.status_code, message=str(exc), response=upstream_error_response(exc),
                           headers=headers, body=body)
    return OpenAIError(status_code=500, message=f"{exc}", headers=headers, body=body)


_CLIENTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = weakref.WeakKeyDictionary()


def _client() -> httpx.AsyncClient:
    """The event loop's client: the one litellm gives its openai clients (its aiohttp transport,
    its TLS configuration, its proxy mounts), made once per loop; every request carries its own
    timeout."""
    loop = asyncio.get_running_loop()
    client = _CLIENTS.get(loop)
    if client is None:
        made = BaseOpenAILLM._get_async_http_client()
        assert isinstance(made, httpx.AsyncClient)  # litellm.aclient_session unset: prepare() checked
        client = _CLIENTS[loop] = made
    return client


@functools.cache
def _sdk() -> openai.AsyncOpenAI:
    """An openai client used only to turn an error response into the SDK's exception. The
    request goes out over ``httpx``, as litellm's own openai client sends it (the SDK types its
    objects as its own transport's, ``httpx2`` under openai 3.x, and reads them alike); litellm
    keeps an error response's headers (``Retry-After``) only from an ``httpx.Response``."""
    return openai.AsyncOpenAI(api_key="unused", base_url="http://127.0.0.1:9/v1", max_retries=0)
