"""Test-side client for the fake model server (`threadline.testing.model_server`) and script builders.

    fake = ModelScript(srv.url)          # server root; a trailing /v1 is dropped. Default: the
                                         # THREADLINE_MODEL_SERVER_URL env var, else http://127.0.0.1:18080
    fake.queue([text("hi"), rate_limit(retry_after=7)], model="m1")   # or: await fake.aqueue(...)
    fake.requests(model="m1")            # journal: [{model, path, stream, scripted, headers, body, time}]
    fake.reset()                         # drop scripts and journal

Module-level `queue`, `reset`, `requests` (and `aqueue`, `areset`, `arequests`) use the default URL.
Builders return plain dicts (the `Script` TypedDict); any script field can be passed as a keyword.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Literal, NotRequired, TypedDict

import httpx

if TYPE_CHECKING:  # annotations only: this module stays importable without the rest of threadline
    from threadline.events.json_types import JSONObject

ENV_URL = "THREADLINE_MODEL_SERVER_URL"
DEFAULT_URL = "http://127.0.0.1:18080"
CONTEXT_OVERFLOW_MESSAGE = ("This model's maximum context length is 8192 tokens. "
                            "However, your messages resulted in 9000 tokens.")


class ToolCall(TypedDict, total=False):
    id: str
    name: str
    arguments: str | JSONObject
    pieces: int


class Script(TypedDict, total=False):
    """One scripted response; the fields are documented in `model_server`'s docstring."""

    status: int
    error: JSONObject
    headers: dict[str, str]
    raw: str
    content_type: str
    delay: float
    ttft: float
    chunk_delay: float
    text: str
    chunks: list[str]
    tool_calls: list[ToolCall]
    reasoning: str
    finish_reason: str
    usage: JSONObject | None
    usage_on_finish: bool
    fail: Literal["error_event", "disconnect", "truncate", "malformed", "stall"]
    fail_after: int
    error_event: JSONObject
    stall_seconds: float
    split: Literal["surrogates", "bytes"]
    times: int
    model: str


class JournalEntry(TypedDict):
    """One request the server received (``GET /_fake/requests``): ``body`` as sent, ``headers``
    with credentials redacted, ``time`` in epoch seconds. ``closed_by`` (``server`` / ``client``)
    and ``closed_at`` once a streamed body ended; ``limited`` for a request refused by a rate
    limit; ``pairing_error`` for one refused by the pairing validator."""

    model: str | None
    path: str
    stream: bool
    scripted: bool
    headers: dict[str, str]
    body: JSONObject
    time: float
    closed_by: NotRequired[str]
    closed_at: NotRequired[float]
    limited: NotRequired[bool]
    pairing_error: NotRequired[str]


class Violation(TypedDict):
    """One request the pairing validator refused: its ``path``, ``model`` and ``reason``."""

    path: str
    model: str | None
    reason: str


class PairingReport(TypedDict):
    """``GET /_fake/pairing``: how many requests were refused since the last reset, the last few."""

    count: int
    violations: list[Violation]


def text(content: str, **fields: object) -> Script:
    """A text reply, streamed in word chunks."""
    return {"text": content, **fields}  # type: ignore[typeddict-item]  # **fields: the other Script keys


def tool_call(name: str, arguments: str | JSONObject | None = None, *, id: str | None = None,
              pieces: int = 3) -> ToolCall:
    """One tool call whose JSON arguments are streamed in `pieces` fragments."""
    call: ToolCall = {"name": name, "arguments": {} if arguments is None else arguments, "pieces": pieces}
    if id:
        call["id"] = id
    return call


def tool_calls(*calls: ToolCall, **fields: object) -> Script:
    """A reply made of (parallel) tool calls; finish_reason defaults to "tool_calls"."""
    return {"tool_calls": list(calls), **fields}  # type: ignore[typeddict-item]  # **fields: the other Script keys


def error(status: int, message: str | None = None, *, type: str | None = None, code: str | int | None = None,
          retry_after: float | None = None, **fields: object) -> Script:
    """An HTTP error response; `retry_after` (seconds) sets the Retry-After header."""
    script: Script = {"status": status, **fields}  # type: ignore[typeddict-item]  # **fields: the other Script keys
    if message is not None:
        script["error"] = {"message": message, "type": type or "invalid_request_error", "param": None, "code": code}
    if retry_after is not None:
        script["headers"] = {**script.get("headers", {}), "retry-after": str(retry_after)}
    return script


def context_overflow(**fields: Any) -> Script:
    """A 400 worded so that litellm raises ContextWindowExceededError."""
    return error(400, CONTEXT_OVERFLOW_MESSAGE, code="context_length_exceeded", **fields)


def rate_limit(retry_after: float = 1, **fields: object) -> Script:
    """A 429 with Retry-After (seconds); litellm raises RateLimitError."""
    return error(429, "Rate limit reached. Please try again later.", type="requests",
                 code="rate_limit_exceeded", retry_after=retry_after, **fields)


def mid_stream(fail: str = "disconnect", after: int = 2, **fields: object) -> Script:
    """A 200 stream that fails (`fail`) after `after` SSE events; litellm raises MidStreamFallbackError."""
    return {"fail": fail, "fail_after": after, **fields}  # type: ignore[typeddict-item]  # **fields: the other Script keys


def in_band_error(code: int = 500, message: str | None = None, after: int = 2, **fields: object) -> Script:
    """A 200 stream that sends `data: {"error": {...}}` after `after` events.

    litellm takes the status from the message wording, not from `code`: a 429 becomes
    MidStreamFallbackError(status 429) only if the message says "rate limit" (or a bare 429), so
    the default 429 message does; context-length wording raises ContextWindowExceededError.
    """
    if message is None:
        message = "Rate limit reached. Please try again later." if code == 429 else "The server had an error."
    return mid_stream("error_event", after, error_event={"error": {"message": message, "code": code}}, **fields)


class ModelScript:
    """Client for the admin API (`/_fake/...`); sync methods and `a`-prefixed async twins."""

    def __init__(self, base_url: str | None = None, timeout: float = 10.0) -> None:
        url = (base_url or os.environ.get(ENV_URL) or DEFAULT_URL).rstrip("/")
        self.base_url = url.removesuffix("/v1")
        self.timeout = timeout

    @staticmethod
    def _payload(scripts: Script | list[Script], model: str | None) -> dict[str, object]:
        return {"scripts": [scripts] if isinstance(scripts, dict) else list(scripts), "model": model}

    @staticmethod
    def _check(response: httpx.Response) -> object:
        if response.status_code >= 400:
            raise ValueError(f"fake model server: {response.status_code} {response.text}")
        return response.json()

    def _call(self, method: str, path: str, *, json: object = None, params: dict[str, str] | None = None) -> Any:
        """The decoded JSON answer (its shape is the endpoint's)."""
        return self._check(httpx.request(method, self.base_url + path, timeout=self.timeout, json=json,
                                         params=params))

    async def _acall(self, method: str, path: str, *, json: object = None,
                     params: dict[str, str] | None = None) -> Any:
        """The decoded JSON answer (its shape is the endpoint's)."""
        # a plain-HTTP server needs no certificates: loading them took ~18 ms of CPU per call,
        # half of the bench process's CPU in the tool-step figure (docs/benchmarks.md)
        plain = self.base_url.startswith("http://")
        async with httpx.AsyncClient(timeout=self.timeout, verify=not plain) as client:
            return self._check(await client.request(method, self.base_url + path, json=json, params=params))

    def queue(self, scripts: Script | list[Script], model: str | None = None) -> int:
        """Append scripts to `model`'s FIFO (global when None); returns how many were queued."""
        return self._call("POST", "/_fake/script", json=self._payload(scripts, model))["queued"]

    def clear(self, model: str | None = None) -> None:
        """Drop queued scripts (only `model`'s when given)."""
        self._call("DELETE", "/_fake/script", params={"model": model} if model else None)

    def reset(self) -> None:
        """Drop all scripts, limits and the request journal."""
        self._call("POST", "/_fake/reset")

    def limit(self, model: str, rps: float | None) -> None:
        """Answer 429 above ``rps`` requests/s of ``model`` (``None`` lifts the limit)."""
        self._call("POST", "/_fake/limit", json={"model": model, "rps": rps})

    async def alimit(self, model: str, rps: float | None) -> None:
        await self._acall("POST", "/_fake/limit", json={"model": model, "rps": rps})

    def requests(self, model: str | None = None) -> list[JournalEntry]:
        """The journal, oldest first: [{model, path, stream, scripted, headers, body, time}]."""
        return self._call("GET", "/_fake/requests", params={"model": model} if model else None)["requests"]

    def pairing(self, *, clear: bool = False) -> PairingReport:
        """The pairing validator's ``{"count": n, "violations": [{path, model, reason}]}`` (requests
        refused for a broken tool-call pairing); ``clear`` sets the count back to 0 after reading."""
        return self._call("POST" if clear else "GET", "/_fake/pairing")

    async def aqueue(self, scripts: Script | list[Script], model: str | None = None) -> int:
        return (await self._acall("POST", "/_fake/script", json=self._payload(scripts, model)))["queued"]

    async def aclear(self, model: str | None = None) -> None:
        await self._acall("DELETE", "/_fake/script", params={"model": model} if model else None)

    async def areset(self) -> None:
        await self._acall("POST", "/_fake/reset")

    async def arequests(self, model: str | None = None) -> list[JournalEntry]:
        return (await self._acall("GET", "/_fake/requests", params={"model": model} if model else None))["requests"]


def queue(scripts: Script | list[Script], model: str | None = None) -> int:
    """`ModelScript().queue` on the default URL."""
    return ModelScript().queue(scripts, model)


def reset() -> None:
    """`ModelScript().reset` on the default URL."""
    ModelScript().reset()


def requests(model: str | None = None) -> list[JournalEntry]:
    """`ModelScript().requests` on the default URL."""
    return ModelScript().requests(model)


async def aqueue(scripts: Script | list[Script], model: str | None = None) -> int:
    return await ModelScript().aqueue(scripts, model)


async def areset() -> None:
    await ModelScript().areset()


async def arequests(model: str | None = None) -> list[JournalEntry]:
    return await ModelScript().arequests(model)
