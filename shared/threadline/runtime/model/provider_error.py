"""A failed model call as Mastra reports it: the AI SDK's ``APICallError`` fields for an HTTP
refusal (``url``, ``requestBodyValues``, ``statusCode``, ``responseHeaders``, ``responseBody``,
``isRetryable``, ``data``), the event's own fields (``type``, ``param``, ``code``) for an error
sent inside the stream, and the provider's own message without litellm's prefixes. Pure
functions over the exception chain litellm raised (docs/decisions.md#model-error-payload)."""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any

import httpx

from threadline.runtime.model.llm_stream import exception_chain

__all__ = ["bare_message", "provider_error"]

_PREFIX = re.compile(r"^(?:litellm\.\w+: |\w*(?:Error|Exception): |OpenAIException - )+")
"""litellm's wrapping of a provider's message: ``litellm.BadRequestError: OpenAIException - ``."""


def bare_message(text: str) -> str:
    """The provider's message without litellm's class prefixes (``litellm.BadRequestError:
    OpenAIException - bad request`` → ``bad request``); the text unchanged when nothing is left."""
    return _PREFIX.sub("", text) or text


def provider_error(exc: BaseException, *, retryable: bool, request_body: dict[str, Any] | None,
                   opened: bool = False) -> dict[str, Any] | None:
    """What the provider said of the failure ``exc`` (litellm's exception and its chain);
    ``opened``: the stream had opened (its HTTP answer was a success).

    Returns ``{name: "AI_APICallError", url, requestBodyValues, statusCode, responseHeaders,
    responseBody, isRetryable, data}`` for an HTTP error answer (``data``: the body parsed as
    JSON, when it is; ``requestBodyValues`` only when the body sent is known), ``{name: "Error",
    type, param, code}`` for an error event inside the stream, ``None`` when neither is found
    (a refused connection, a timeout)."""
    chain = exception_chain(exc)
    response = None if opened else next(
        (r for x in chain if isinstance(r := getattr(x, "response", None), httpx.Response) and r.status_code >= 400),
        None)
    if response is not None:
        return _http_error(response, retryable=retryable, request_body=request_body)
    event = next((b for x in chain if isinstance(b := getattr(x, "body", None), dict)
                  and "message" in b and "type" in b), None)
    if event is not None:
        return {"name": "Error", "type": event.get("type"), "param": event.get("param"), "code": event.get("code")}
    return None


def _http_error(response: httpx.Response, *, retryable: bool,
                request_body: dict[str, Any] | None) -> dict[str, Any]:
    try:
        body = response.text
    except httpx.ResponseNotRead:  # a stream never read: its body is unknown
        body = None
    out: dict[str, Any] = {"name": "AI_APICallError"}
    with contextlib.suppress(RuntimeError):  # a response built without its request has no url
        out["url"] = str(response.request.url)
    if request_body is not None:
        out["requestBodyValues"] = request_body
    out.update(statusCode=response.status_code, responseHeaders=dict(response.headers.items()),
               responseBody=body, isRetryable=retryable)
    with contextlib.suppress(ValueError):  # a body that is not JSON has no data
        out["data"] = json.loads(body) if body else None
    return out
